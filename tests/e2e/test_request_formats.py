"""An endpoint that serves OpenAI bodies only (vLLM's SageMaker route), judged end to end.

`benchmark.requestFormat: chat` (the eval follows it unless evaluation.requestFormat says
otherwise): the benchmark streams chat completions and reads the server-sent events, the
eval asks greedy chat answers, and the candidate is judged and promoted. With the default
`lmi` body the same endpoint refuses every request (HTTP 400, as vLLM does); the baseline
is never measured: the resource is Failed (the same request would fail again; a spec
edit starts a new generation), nothing is built, and the status says which field to set.
"""

from __future__ import annotations

from typing import Any

from endpoint_optimizer.sandbox.evalset import DATA_FILE as EVAL_FILE
from tests.e2e.conftest import E2E, GUARD, NO_MUST_PASS, spec

VLLM = (
    "763104351884.dkr.ecr.us-east-1.amazonaws.com/"
    "vllm:0.11.2-gpu-py312-cu129-ubuntu22.04-sagemaker-v1.2"
)
CONFIG_MAP = "evals"
KEY = "items.jsonl"
ENDS = {"Succeeded", "Failed", "RolledBack"}


def vllm_spec(e2e: E2E, **benchmark: Any) -> dict[str, Any]:
    items = EVAL_FILE.read_text().splitlines()[:60]
    e2e.cluster.create_configmap(e2e.namespace, CONFIG_MAP, {KEY: "\n".join(items)})
    base = spec()
    return spec(
        model={**base["model"], "image": VLLM},
        benchmark={**base["benchmark"], **benchmark},
        evaluation={
            "dataset": {"configMapRef": {"name": CONFIG_MAP, "key": KEY}},
            "metric": "exact_match",
            "maxOutputTokens": 12,
            # 60 items cannot resolve a one-point margin: the request format is the subject.
            "maxAbsoluteDrop": 0.5,
            "slices": NO_MUST_PASS,
        },
    )


def test_an_openai_only_endpoint_is_benchmarked_evaluated_and_promoted_in_chat_format(
    e2e: E2E,
) -> None:
    names = e2e.create("chat", vllm_spec(e2e, requestFormat="chat"))
    obj = e2e.wait_phase("chat", ENDS)
    status = obj["status"]
    assert status["phase"] == "Succeeded", e2e.explain(obj)
    verdicts = {c["name"]: c["verdict"] for c in status["checks"]}
    assert verdicts.get("eval_exact_match") == "Pass", verdicts
    assert status["baseline"]["evalItems"] == status["candidate"]["evalItems"] == 60
    assert status["baseline"]["evalScore"] > 0.5
    traffic = e2e.sandbox.admin.traffic("chat-e2e")
    assert traffic and not [r for r in traffic if r["status"] == 400]
    assert e2e.serving("chat-e2e")["EndpointConfigName"] == names.promoted_config


def test_an_lmi_body_refused_by_the_endpoint_names_the_field_to_set(e2e: E2E) -> None:
    e2e.create("chat", vllm_spec(e2e))
    obj = e2e.cluster.wait_for(
        e2e.namespace,
        "chat",
        lambda o: "requestFormat" in str(o.get("status", {}).get("message", "")),
        timeout=GUARD,
        what="a message naming spec.benchmark.requestFormat",
        on_timeout=e2e.diagnostics,
    )
    status = obj["status"]
    # The first request refused is an eval answer or a benchmark stream, whichever runs
    # first: both say which field to set.
    assert status["phase"] in ("Baselining", "Failed"), e2e.explain(obj)
    assert "400" in status["message"]
    obj = e2e.wait_phase("chat", "Failed")
    assert "spec.benchmark.requestFormat" in obj["status"]["message"]
    # Nothing was built or deployed for a baseline that could not be measured.
    state = e2e.sandbox.admin.state()
    assert not state.get("optimizationJobs")
    refused = [r for r in e2e.sandbox.admin.traffic("chat-e2e") if r["status"] == 400]
    assert refused

"""SIGKILL at the newest steps of the pipeline: the shadow switch and the retention delete.

One lifecycle of a shadow rollout with an eval set (so the candidate is first a weight-0
"pinned" production variant, then moves to the shadow config) and a short
rollout.baselineRetention. The operator is killed right after the UpdateEndpoint that
switches the endpoint from the pinned config to the shadow config, and again right after
the first DeleteEndpointConfig of the retention delete, each time before it can write what
it did into status. Kill points and the prober come from tests/e2e/test_crash.py.

After each restart, from SageMaker and status alone: the same end phase as without the
kills (test_shadow_checks.py promotes this candidate), no twin config or model and no
repeated update, nothing in the sandbox that status.sagemaker does not name, and every
probe answered by the baseline variant until the promotion, by the candidate after it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from endpoint_optimizer.pipeline.plan import Names
from tests.e2e.conftest import E2E, GUARD, production_traffic, spec
from tests.e2e.test_crash import (
    ENDPOINT,
    PROBE_TOKENS,
    CallPredicate,
    Killer,
    KillPoint,
    Prober,
    call,
    ok_calls,
    wait_in_service,
)
from tests.e2e.test_shadow import SHADOW
from tests.e2e.test_shadow_checks import evaluation


def after_rollout_config(operation: str) -> CallPredicate:
    """The first successful `operation` after the shadow (rollout) config was created.

    begin_shadow creates the shadow config and then updates the endpoint to it; the update
    before it was the pinned config's, the one after it the promotion's.
    """
    created = call("CreateEndpointConfig", lambda n: n.rollout_config)
    armed: list[bool] = []

    def matches(record: dict[str, Any], names: Names) -> bool:
        if created(record, names):
            armed.append(True)
            return False
        return bool(armed) and call(operation)(record, names)

    return matches


SHADOW_SWITCH = KillPoint(
    "after the UpdateEndpoint from the pinned config to the shadow config",
    after_rollout_config("UpdateEndpoint"),
)
RETENTION_DELETE = KillPoint(
    "after the first DeleteEndpointConfig of the retention delete",
    call("DeleteEndpointConfig"),
)


# The prober's request (tests/e2e/test_crash.py: Prober).
PROBE_BODY = b'{"inputs": "probe: are you there?", "parameters": {"max_new_tokens": 2}}'


def history(obj: dict[str, Any]) -> list[str]:
    return [h["event"] for h in obj.get("status", {}).get("history", [])]


def probe_input_tokens(e2e: E2E) -> int:
    """The prompt length the sandbox counts for the prober's request (sent once, marked).

    The eval set's answers are short and unstreamed too, but pinned to a variant on
    purpose; the prompt's length tells the probes from them.
    """
    e2e.sandbox.client("sagemaker-runtime").invoke_endpoint(
        EndpointName=ENDPOINT, Body=PROBE_BODY, ContentType="application/json", InferenceId="probe"
    )
    marked = [r for r in e2e.sandbox.admin.traffic(ENDPOINT) if r.get("inference_id") == "probe"]
    tokens: int = marked[0]["input_tokens"]
    return tokens


def assert_served_by_baseline_then_candidate(
    e2e: E2E, names: Names, baseline: str, input_tokens: int
) -> None:
    """Every probe in the traffic record: the baseline variant until the promoted config
    served, the candidate on it after; the candidate never served users before."""
    probes = [
        r
        for r in e2e.sandbox.admin.traffic(ENDPOINT)
        if not r["stream"]
        and not r["shadow"]
        and r["output_tokens"] <= PROBE_TOKENS
        and r["input_tokens"] == input_tokens
    ]
    assert probes
    served = [(r["endpoint_config"] == names.promoted_config, r["variant"]) for r in probes]
    wrong = [s for s in served if s not in ((False, baseline), (True, names.candidate_variant))]
    assert not wrong, f"probes served by an unexpected variant: {Counter(wrong)}"
    promoted = [p for p, _ in served]
    assert promoted == sorted(promoted), "a probe went back to the baseline after promotion"
    assert any(promoted) and not all(promoted), Counter(served)


def test_sigkill_at_the_shadow_switch_and_the_retention_delete_reaches_the_same_end(
    e2e: E2E,
) -> None:
    rollout = {**SHADOW, "baselineRetention": "2s"}  # x TIME_SCALE 0.5: 1 s after promotion
    names = e2e.create(
        "chat", spec(rollout=rollout, evaluation=evaluation(e2e, 40, 0.1), deletionPolicy="Delete")
    )
    killer = Killer(e2e, names)
    wait_in_service(e2e)
    input_tokens = probe_input_tokens(e2e)
    with production_traffic(e2e.sandbox, ENDPOINT), Prober(e2e) as prober:
        killer.wait_and_kill(SHADOW_SWITCH, timeout=GUARD)
        assert e2e.serving(ENDPOINT)["EndpointConfigName"] in (
            names.pinned_config,
            names.rollout_config,
        )
        killer.wait_and_kill(RETENTION_DELETE, timeout=GUARD)
        obj = e2e.cluster.wait_for(
            e2e.namespace,
            "chat",
            lambda o: bool(o["status"].get("sagemaker", {}).get("baselineDeletedAt")),
            timeout=GUARD,
            what="baselineDeletedAt",
            on_timeout=e2e.diagnostics,
        )
    prober.assert_all_answered()
    status = obj["status"]
    assert status["phase"] == "Succeeded", e2e.explain(obj)
    events = history(obj)
    # The same story as without the kills (the switch's own entry is written again).
    assert events.index("PinnedChecksPassed") < events.index("ShadowStarted"), e2e.explain(obj)
    assert events.index("ShadowStarted") < events.index("CandidatePromoted"), e2e.explain(obj)
    assert events.count("PinnedChecksPassed") == 1, e2e.explain(obj)
    assert events[-1] == "BaselineDeleted", e2e.explain(obj)
    assert "BaselineDeleteFailed" not in events
    assert e2e.serving(ENDPOINT)["EndpointConfigName"] == names.promoted_config

    # No twins: each config and model created once; one update per stage, none repeated.
    for operation in ("CreateEndpointConfig", "CreateModel"):
        made = Counter(c["resource"] for c in ok_calls(e2e, operation))
        assert all(n == 1 for n in made.values()), (operation, made)
    assert len(ok_calls(e2e, "UpdateEndpoint")) == 3, "pinned, shadow, promotion"
    assert len(ok_calls(e2e, "CreateOptimizationJob")) == 1

    # Nothing leaked: what remains is what status names, and only what serves remains.
    state = e2e.sandbox.admin.state()
    sagemaker = status["sagemaker"]
    assert set(state["endpointConfigs"]) <= set(sagemaker["endpointConfigs"])
    assert set(state["models"]) <= set(sagemaker["models"])
    assert list(state["endpointConfigs"]) == [names.promoted_config]
    assert list(state["models"]) == [names.candidate_model]
    deleted = {c["resource"] for c in ok_calls(e2e, "DeleteEndpointConfig")}
    assert deleted == {names.baseline_config, names.pinned_config, names.rollout_config}
    assert {c["resource"] for c in ok_calls(e2e, "DeleteModel")} == {names.baseline_model}

    assert_served_by_baseline_then_candidate(
        e2e, names, status["baseline"]["variantName"], input_tokens
    )
    assert len(killer.killed) == 2

"""Jobs a search started ahead (search.parallelJobs) for candidates it never reached are
stopped when it ends: nothing will use them, and a job bills its instance until it ends."""

from __future__ import annotations

from typing import Any

from endpoint_optimizer.api import SearchRow, SearchStatus
from endpoint_optimizer.pipeline import plan
from endpoint_optimizer.pipeline.decide import decide
from endpoint_optimizer.pipeline.model import ActionKind, Observations, Resource, Timing
from tests.unit.pipeline.test_decide import NAMES, NOW, OWNER, baselined, serving, spec


def _search_spec() -> dict[str, Any]:
    data = spec(
        search={
            "quantization": [
                {"name": "fp8", "scheme": "fp8"},
                {"name": "awq", "scheme": "awq"},
                {"name": "gptq", "scheme": "gptq"},
            ],
            "parallelJobs": 2,
            "budget": {"instanceHours": 0.5},
        }
    )
    del data["optimizations"]
    return data


def _job(stack: tuple[str, ...]) -> str:
    return plan.search_names(NAMES, OWNER, 1, stack).job


def test_the_end_of_a_search_stops_the_jobs_built_for_candidates_it_never_reached() -> None:
    status = baselined()
    status.phase = status.phase.SEARCHING
    # fp8 kept, awq measured on it; gptq's job was started ahead while awq was measured,
    # and the instance-hours budget is spent before gptq's turn.
    status.search = SearchStatus(
        rows=[
            SearchRow(name="fp8", rung="quantization", base=[], verdict="Kept", measured=True,
                      gain=0.4, improves=True, gates=True, instance_hours=0.3),
            SearchRow(name="awq", rung="quantization", base=["fp8"], verdict="NoGain",
                      measured=True, gain=0.01, gates=True, instance_hours=0.3),
        ],
        best=["fp8"],
        candidates=2,
        instance_hours=0.6,
    )  # fmt: skip
    reached = [_job(("fp8",)), _job(("fp8", "awq"))]
    unreached = _job(("fp8", "gptq"))
    status.sagemaker.optimization_jobs = [*reached, unreached]
    decision = decide(
        _search_spec(),
        status,
        Observations(endpoint=serving(NAMES.baseline_config, (NAMES.baseline_variant, 1.0))),
        Resource(OWNER, 1),
        NOW,
        Timing(time_scale=1.0),
    )
    stops = [a for a in decision.actions if a.kind is ActionKind.STOP_OPTIMIZATION_JOB]
    assert [a.resource for a in stops] == [unreached], decision.actions
    assert stops[0].request == {"OptimizationJobName": unreached}
    assert decision.status["phase"] == "Optimizing", decision.status.get("message")

"""The datasets a spec names: read on demand, parsed before any traffic, problems said once.

Wake-ups against the sandbox (real boto3); the ConfigMaps come from an in-memory reader
that counts its reads (the operator's own reader, a GET through kopf's client, runs in the
e2e tests against the emulator). The sandbox's traffic record shows whether a request
reached the endpoint.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.controller.configmaps import ConfigMapProblem, StaticConfigMaps
from endpoint_optimizer.controller.options import OperatorOptions
from endpoint_optimizer.controller.reconcile import Dependencies, Woken, wake
from endpoint_optimizer.evaluation.spot_check import CONFIGMAP_KEY
from endpoint_optimizer.metrics.exporter import OperatorMetrics
from endpoint_optimizer.sagemaker.naming import Owner
from endpoint_optimizer.sandbox.evalset import DATA_FILE as EVAL_FILE
from endpoint_optimizer.sandbox.testing import SandboxHandle
from tests.e2e.conftest import spec as e2e_spec
from tests.unit.controller.test_reconcile import ENDPOINT, make_body, merge

ITEM = '{"prompt": "Capital of France?", "reference": "Paris"}'
EVALUATION = {
    "dataset": {"configMapRef": {"name": "support-evals", "key": "items.jsonl"}},
    "metric": "exact_match",
    "maxOutputTokens": 8,
}


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def deps(sandbox: SandboxHandle) -> AsyncIterator[Dependencies]:
    options = OperatorOptions(poll_interval=0.05, time_scale=0.5, retry_max_delay=1.0)
    made = Dependencies(
        AwsClients(max_concurrency=2),
        OperatorMetrics(),
        options,
        clock=Clock(),
        config_maps=StaticConfigMaps(),
    )
    yield made
    made.aws.close()


async def step(deps: Dependencies, body: dict[str, Any]) -> Woken:
    """One wake-up, after any backoff status asks for (the clock moves on to it)."""
    clock = deps.clock
    assert isinstance(clock, Clock)
    waiting = body["status"].get("retry")
    clock.now = datetime.fromisoformat(waiting["nextAttemptAt"]) if waiting else datetime.now(UTC)
    woken = await wake(deps, body, {})
    merge(body["status"], woken.status_patch)
    return woken


async def until(deps: Dependencies, body: dict[str, Any], done: Any) -> list[Woken]:
    woken: list[Woken] = []
    deadline = time.monotonic() + 60
    while not done(body["status"]):
        assert time.monotonic() < deadline, body["status"].get("message")
        woken.append(await step(deps, body))
        await asyncio.sleep(0.02)
    return woken


def warnings(woken: list[Woken]) -> list[str]:
    return [e.reason for w in woken for e in w.events if e.type == "Warning"]


async def test_a_missing_then_malformed_eval_set_sends_no_traffic_and_warns_once_each(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    config_maps = deps.config_maps
    assert isinstance(config_maps, StaticConfigMaps)
    body = make_body(e2e_spec(endpointName=ENDPOINT, evaluation=EVALUATION))
    created = await until(deps, body, lambda s: s.get("phase") == "Baselining")
    assert config_maps.reads == 0, "no measurement yet, nothing read"

    # The baseline would be measured now, but the eval set is not there.
    missing = await until(deps, body, lambda s: (s.get("retry") or {}).get("attempt", 0) >= 3)
    assert body["status"]["retry"]["reason"] == "ConfigMapMissing"
    assert "ConfigMap ml/support-evals does not exist" in body["status"]["lastError"]
    assert "spec.evaluation.dataset" in body["status"]["message"]
    assert warnings(created + missing) == ["ConfigMapMissing"]
    assert sandbox.admin.traffic_records(ENDPOINT) == [], "no request before the data is good"

    # A different problem is a new Warning, once; still no traffic.
    config_maps.items[("ml", "support-evals")] = {"items.jsonl": ITEM + "\n{not json"}
    malformed = [await step(deps, body) for _ in range(3)]
    assert body["status"]["retry"]["reason"] == "DatasetInvalid"
    assert "line 2: not JSON" in body["status"]["lastError"]
    assert warnings(malformed) == ["DatasetInvalid"]
    assert sandbox.admin.traffic_records(ENDPOINT) == []
    assert "Capital of France" not in body["status"]["lastError"]

    # Fixed: the baseline is benchmarked and scored, and the retry is gone.
    config_maps.items[("ml", "support-evals")] = {"items.jsonl": ITEM}
    await until(deps, body, lambda s: (s.get("baseline") or {}).get("measuredAt") is not None)
    assert "retry" not in body["status"]
    assert sandbox.admin.traffic_records(ENDPOINT)
    assert body["status"]["baseline"]["evalItems"] == 1


async def test_the_key_must_be_there_and_the_benchmark_prompts_parse_too(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    config_maps = deps.config_maps
    assert isinstance(config_maps, StaticConfigMaps)
    config_maps.items[("ml", "prompts")] = {"other.jsonl": '{"prompt": "hi"}'}
    dataset = {"configMapRef": {"name": "prompts", "key": "prompts.jsonl"}}
    benchmark = {**e2e_spec()["benchmark"], "dataset": dataset}
    body = make_body(e2e_spec(endpointName=ENDPOINT, benchmark=benchmark))
    await until(deps, body, lambda s: s.get("retry") is not None)
    assert "has no key prompts.jsonl (its keys: other.jsonl)" in body["status"]["lastError"]
    config_maps.items[("ml", "prompts")] = {"prompts.jsonl": '{"prompt": 3}'}
    await until(deps, body, lambda s: (s.get("retry") or {}).get("reason") == "DatasetInvalid")
    assert (
        "spec.benchmark.dataset: ConfigMap prompts key prompts.jsonl, line 1"
        in (body["status"]["lastError"])
    )
    assert sandbox.admin.traffic_records(ENDPOINT) == []


class RefusingWrites(StaticConfigMaps):
    """Reads work; the first `refusals` writes are forbidden, as a Role without `create`."""

    def __init__(self, refusals: int) -> None:
        super().__init__()
        self.refusals = refusals
        self.writes = 0

    async def publish(self, owner: Owner, name: str, data: Mapping[str, str]) -> None:
        self.writes += 1
        if self.writes <= self.refusals:
            raise ConfigMapProblem("ConfigMapForbidden", f"may not write ConfigMap {name}")
        await super().publish(owner, name, data)


@pytest.mark.usefixtures("tolerant_guard")
async def test_a_refused_spot_check_write_keeps_the_comparison_out_until_it_is_written(
    deps: Dependencies, sandbox: SandboxHandle
) -> None:
    store = RefusingWrites(refusals=1)
    store.items[("ml", "support-evals")] = {"items.jsonl": EVAL_FILE.read_text()}
    deps.config_maps = store
    evaluation = {**EVALUATION, "maxAbsoluteDrop": 0.5, "spotCheck": {"samples": 4}}
    rollout = {
        "strategy": "canary",
        "steps": [{"weight": 10, "pause": "1s"}],
        "analysis": {"onNoData": "pass"},
        "approval": "beforePromotion",
    }
    body = make_body(e2e_spec(endpointName=ENDPOINT, evaluation=evaluation, rollout=rollout))
    woken = await until(deps, body, lambda s: store.writes >= 1)
    refused = woken[-1].status_patch
    # The comparison that could not write its samples is not kept: no checks, no candidate.
    assert body["status"].get("checks") in (None, [])
    assert "spotCheck" not in body["status"]
    assert body["status"]["retry"]["reason"] == "ConfigMapForbidden", refused
    # The next comparison writes them, then enters status (whatever its verdict: the
    # deterministic serving here has no gain to find, so it ends in NoImprovement).
    await until(deps, body, lambda s: "spotCheck" in s)
    assert store.writes == 2
    assert body["status"]["spotCheck"] == {"configMap": "chat-spot-check", "samples": 4}
    written = store.items[("ml", "chat-spot-check")]
    assert len(json.loads(written[CONFIGMAP_KEY])["samples"]) == 4

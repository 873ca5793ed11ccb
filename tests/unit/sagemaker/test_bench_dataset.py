"""spec.benchmark.dataset: JSONL prompts from a ConfigMap key reach the benchmark's requests."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest

from endpoint_optimizer.api import ConfigMapRef, OptimizedEndpointSpec, parse_spec
from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.observe import observe
from endpoint_optimizer.aws.perform import bench_config, bench_prompts, perform
from endpoint_optimizer.bench.workload import DatasetError
from endpoint_optimizer.evaluation.dataset import EvalDatasetError
from endpoint_optimizer.pipeline.assess import judge
from endpoint_optimizer.pipeline.model import Action, ActionKind
from endpoint_optimizer.pipeline.plan import Names, baseline_model, variant
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker.naming import Owner
from endpoint_optimizer.sandbox.config import SandboxConfig
from endpoint_optimizer.sandbox.evalset import DATA_FILE as EVAL_FILE
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox
from tests.e2e.conftest import spec as e2e_spec

REF = ConfigMapRef(name="extraction-prompts", key="prompts.jsonl")
BENCHMARK = {
    "concurrency": [2],
    "requests": 8,
    "warmup": 0,
    "inputTokens": 64,
    "outputTokens": 8,
    "dataset": {"configMapRef": {"name": REF.name, "key": REF.key}},
}
SPEC = parse_spec(e2e_spec(endpointName="bench-dataset", benchmark=BENCHMARK))
LINES = [
    json.dumps({"prompt": "Extract the invoice number: INV-2231 due March", "outputTokens": 3}),
    "",
    json.dumps({"messages": [{"role": "user", "content": "List the dates"}], "outputTokens": 5}),
]


def test_the_configmap_text_becomes_the_benchmarks_prompts() -> None:
    config = bench_config(SPEC, "\n".join(LINES))
    assert config.dataset is not None
    assert [item.output_tokens for item in config.dataset] == [3, 5]
    assert config.dataset[0].prompt is not None and "INV-2231" in config.dataset[0].prompt
    assert config.dataset[1].messages == [{"role": "user", "content": "List the dates"}]


def test_without_a_dataset_the_prompts_stay_synthetic() -> None:
    plain = parse_spec(e2e_spec())
    assert bench_config(plain, "ignored").dataset is None


def test_a_missing_configmap_names_it_and_its_key() -> None:
    with pytest.raises(DatasetError, match=r"ConfigMap extraction-prompts key prompts\.jsonl"):
        bench_config(SPEC, None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"prompt": "secret words here"}\nnot json at all', r"line 2: not JSON"),
        ('{"prompt": "secret words here", "body": {"inputs": "x"}}', r"line 1: .*exactly one"),
        ("\n  \n", r"holds no prompts"),
    ],
)
def test_a_malformed_dataset_names_the_line_and_never_echoes_a_prompt(
    text: str, expected: str
) -> None:
    with pytest.raises(DatasetError, match=expected) as raised:
        bench_prompts(text, REF)
    message = str(raised.value)
    assert "extraction-prompts" in message and "prompts.jsonl" in message
    assert "secret" not in message


@pytest.fixture
def sandbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[SandboxHandle]:
    with running_sandbox(SandboxConfig(time_scale=0.001, serving_time_scale=0.01)) as handle:
        for key, value in handle.environment.items():
            monkeypatch.setenv(key, value)
        yield handle


async def serve_baseline(aws: AwsClients, spec: OptimizedEndpointSpec) -> str:
    """Create the baseline endpoint through perform and wait for InService; its variant."""
    names = Names.of(Owner("ml", "chat", "uid"), 1)
    model = baseline_model(spec, names)
    config = rq.create_endpoint_config(
        names.baseline_config, [variant(spec, names.baseline_variant, model.name)], "o"
    )
    for action in (
        Action(ActionKind.CREATE_MODEL, model.name, rq.create_model(model, "o")),
        Action(ActionKind.CREATE_ENDPOINT_CONFIG, names.baseline_config, config),
        Action(
            ActionKind.CREATE_ENDPOINT,
            spec.endpoint_name,
            rq.create_endpoint(spec.endpoint_name, names.baseline_config, "o"),
        ),
    ):
        await perform(aws, spec, action)
    deadline = time.monotonic() + 10
    observed = await observe(aws, spec.region, spec.endpoint_name)
    while not (observed.endpoint and observed.endpoint.in_service):
        assert time.monotonic() < deadline, observed
        await asyncio.sleep(0.02)
        observed = await observe(aws, spec.region, spec.endpoint_name)
    return names.baseline_variant


async def test_the_baseline_benchmark_sends_the_datasets_prompts(sandbox: SandboxHandle) -> None:
    aws = AwsClients(max_concurrency=2)
    try:
        baseline_variant = await serve_baseline(aws, SPEC)
        measure = Action(
            ActionKind.MEASURE_BASELINE, SPEC.endpoint_name, baseline_variant=baseline_variant
        )
        measured = await perform(aws, SPEC, measure, bench_dataset="\n".join(LINES))
    finally:
        aws.close()
    assert measured is not None
    records = sandbox.admin.traffic_records(SPEC.endpoint_name)
    assert len(records) == 8
    # The items alternate; each asks for its own outputTokens, not spec.benchmark's 8.
    assert sorted(r.output_tokens for r in records) == [3] * 4 + [5] * 4
    assert all(r.input_tokens < 64 for r in records)


async def test_the_baseline_is_scored_on_the_eval_set_before_any_candidate(
    sandbox: SandboxHandle,
) -> None:
    evaluation = {
        "dataset": {"configMapRef": {"name": "evals", "key": "items.jsonl"}},
        "metric": "exact_match",
        "maxOutputTokens": 12,
    }
    spec = parse_spec(
        e2e_spec(endpointName="baseline-eval", benchmark=BENCHMARK, evaluation=evaluation)
    )
    items = EVAL_FILE.read_text().splitlines()[:20]
    aws = AwsClients(max_concurrency=2)
    try:
        baseline_variant = await serve_baseline(aws, spec)
        measure = Action(
            ActionKind.MEASURE_BASELINE, spec.endpoint_name, baseline_variant=baseline_variant
        )
        with pytest.raises(EvalDatasetError, match=r"ConfigMap evals with key items\.jsonl"):
            await perform(aws, spec, measure, bench_dataset="\n".join(LINES))
        raw = await perform(
            aws, spec, measure, eval_dataset="\n".join(items), bench_dataset="\n".join(LINES)
        )
    finally:
        aws.close()
    assert raw is not None
    # perform brings the answers back; the pipeline scores them.
    assert raw.baseline is not None and raw.baseline.answers is not None
    assert len(raw.baseline.answers.texts) == len(raw.eval_items) == 20
    measured = judge(spec, raw)
    assert measured.baseline.eval_items == 20
    assert measured.baseline.eval_score is not None and measured.baseline.eval_score > 0.5
    assert measured.baseline.refusal_rate is not None
    # Fewer items than evaluation.noiseItems (200): every one is asked a second time, after
    # the whole set, and the two askings are the eval set's A/A noise.
    assert raw.repeated == tuple(range(20))
    assert raw.repeat_answers is not None and len(raw.repeat_answers.texts) == 20
    assert measured.eval_noise is not None
    assert (measured.eval_noise.items, measured.eval_noise.eval_items) == (20, 20)
    pinned = [r for r in sandbox.admin.traffic_records(spec.endpoint_name) if not r.stream]
    assert len(pinned) == 40 and {r.variant for r in pinned} == {baseline_variant}
    # A missing eval set is refused before the benchmark spends any traffic.
    assert len(sandbox.admin.traffic_records(spec.endpoint_name)) == 48

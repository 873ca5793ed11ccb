"""The SageMaker layer over real HTTP against the sandbox: adopt, not-found, bounded retries."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from botocore.config import Config

from endpoint_optimizer.api import parse_spec
from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.errors import ErrorKind, SageMakerError
from endpoint_optimizer.aws.observe import observe
from endpoint_optimizer.aws.perform import perform
from endpoint_optimizer.pipeline.model import Action, ActionKind
from endpoint_optimizer.pipeline.plan import Names, baseline_model, variant
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker.naming import Owner
from endpoint_optimizer.sandbox.config import Faults, SandboxConfig
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox
from tests.e2e.conftest import spec as e2e_spec

SPEC = parse_spec(e2e_spec(endpointName="layer-test"))
NAMES = Names.of(Owner("ml", "chat", "uid"), 1)


@pytest.fixture
def sandbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[SandboxHandle]:
    with running_sandbox(SandboxConfig(time_scale=0.001, serving_time_scale=0.01)) as handle:
        for key, value in handle.environment.items():
            monkeypatch.setenv(key, value)
        yield handle


@pytest.fixture
def aws(sandbox: SandboxHandle) -> Iterator[AwsClients]:
    seen: list[object] = []
    clients = AwsClients(max_concurrency=2, on_new_client=seen.append)
    yield clients
    clients.close()
    assert seen, "every new client is announced (the metrics exporter instruments it)"


async def test_a_repeated_create_adopts_the_resource_it_made(
    aws: AwsClients, sandbox: SandboxHandle
) -> None:
    model = baseline_model(SPEC, NAMES)
    create = Action(ActionKind.CREATE_MODEL, model.name, rq.create_model(model, "ml/chat/uid"))
    await perform(aws, SPEC, create)
    await perform(aws, SPEC, create)  # after a crash: the same name, no twin, no error
    assert list(sandbox.admin.state()["models"]) == [model.name]


async def test_observing_a_missing_endpoint_is_none_not_an_error(aws: AwsClients) -> None:
    observed = await observe(aws, "us-east-1", "no-such-endpoint", jobs=["no-such-job"])
    assert observed.endpoint is None
    assert observed.jobs == {}


async def test_an_endpoint_is_observed_with_its_variants_model_names(
    aws: AwsClients, sandbox: SandboxHandle
) -> None:
    model = baseline_model(SPEC, NAMES)
    config = rq.create_endpoint_config(
        NAMES.baseline_config, [variant(SPEC, NAMES.baseline_variant, model.name)], "o"
    )
    for action in (
        Action(ActionKind.CREATE_MODEL, model.name, rq.create_model(model, "o")),
        Action(ActionKind.CREATE_ENDPOINT_CONFIG, NAMES.baseline_config, config),
        Action(
            ActionKind.CREATE_ENDPOINT,
            "layer-test",
            rq.create_endpoint("layer-test", NAMES.baseline_config, "o"),
        ),
    ):
        await perform(aws, SPEC, action)
    deadline = time.monotonic() + 10
    observed = await observe(aws, "us-east-1", "layer-test")
    while not (observed.endpoint and observed.endpoint.in_service):
        assert time.monotonic() < deadline, observed
        await asyncio.sleep(0.02)
        observed = await observe(aws, "us-east-1", "layer-test")
    assert observed.endpoint.config_name == NAMES.baseline_config
    assert [(v.name, v.model_name) for v in observed.endpoint.variants] == [
        (NAMES.baseline_variant, model.name)
    ]


async def test_throttling_is_retried_a_bounded_number_of_times_then_classified(
    sandbox: SandboxHandle,
) -> None:
    sandbox.admin.set_faults(
        Faults(throttle_fraction=1.0, throttle_operations=["DescribeEndpoint"])
    )
    aws = AwsClients(
        max_concurrency=1,
        config=Config(retries={"mode": "standard", "total_max_attempts": 3}),
    )
    try:
        with pytest.raises(SageMakerError) as raised:
            await observe(aws, "us-east-1", "layer-test")
    finally:
        aws.close()
    assert raised.value.kind is ErrorKind.THROTTLED
    assert raised.value.retryable
    attempts = [c for c in sandbox.admin.calls() if c["operation"] == "DescribeEndpoint"]
    assert len(attempts) == 3

"""observe() under a sparse plan, against the sandbox: the calls it skips are really skipped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from endpoint_optimizer.api import parse_spec
from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.observe import observe
from endpoint_optimizer.aws.perform import perform
from endpoint_optimizer.pipeline.cadence import EndpointCadence, ObservePlan
from endpoint_optimizer.pipeline.model import (
    Action,
    ActionKind,
    EndpointView,
    JobView,
    Observations,
)
from endpoint_optimizer.pipeline.plan import Names, optimization_job
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker.naming import Owner
from endpoint_optimizer.sandbox.config import SandboxConfig
from endpoint_optimizer.sandbox.testing import SandboxHandle, running_sandbox
from tests.e2e.conftest import spec as e2e_spec

SPEC = parse_spec(e2e_spec(endpointName="cadence-test"))
NAMES = Names.of(Owner("ml", "chat", "uid"), 1)
REGION = "us-east-1"
LAST = Observations(
    EndpointView("cadence-test", "InService", "config-a"),
    jobs={"job-a": JobView("job-a", "COMPLETED", output_s3_uri="s3://models/out/job-a/")},
)
WAITING = ObservePlan(EndpointCadence.IF_JOBS_SETTLED, jobs=True)


@pytest.fixture
def sandbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[SandboxHandle]:
    # Real-time control plane: a job started here stays INPROGRESS for the whole test.
    with running_sandbox(SandboxConfig(time_scale=1.0, serving_time_scale=0.01)) as handle:
        for key, value in handle.environment.items():
            monkeypatch.setenv(key, value)
        yield handle


@pytest.fixture
def aws(sandbox: SandboxHandle) -> Iterator[AwsClients]:
    clients = AwsClients(max_concurrency=2)
    yield clients
    clients.close()


def operations(sandbox: SandboxHandle, since: int) -> list[str]:
    return [c["operation"] for c in sandbox.admin.calls()[since:]]


async def test_a_running_job_is_described_and_the_endpoint_taken_from_the_last_look(
    aws: AwsClients, sandbox: SandboxHandle
) -> None:
    job = optimization_job(SPEC, NAMES)
    assert job is not None
    create = rq.create_optimization_job(job, "ml/chat/uid")
    await perform(aws, SPEC, Action(ActionKind.CREATE_OPTIMIZATION_JOB, job.name, create))
    before = len(sandbox.admin.calls())
    observed = await observe(aws, REGION, "cadence-test", jobs=[job.name], plan=WAITING, last=LAST)
    assert operations(sandbox, before) == ["DescribeOptimizationJob"]
    assert observed.jobs[job.name].status == "INPROGRESS"
    assert observed.endpoint == LAST.endpoint
    assert not observed.endpoint_described and not observed.complete


async def test_a_settled_job_makes_the_same_wakeup_describe_the_endpoint(
    aws: AwsClients, sandbox: SandboxHandle
) -> None:
    # A job that is not there any more is settled too: decide() must see the endpoint now.
    observed = await observe(
        aws, REGION, "cadence-test", jobs=["gone-job"], plan=WAITING, last=LAST
    )
    assert operations(sandbox, 0) == ["DescribeOptimizationJob", "DescribeEndpoint"]
    assert observed.endpoint is None  # really described: the sandbox has no such endpoint
    assert observed.endpoint_described and observed.complete


async def test_the_recheck_describes_the_endpoint_and_keeps_the_last_job_view(
    aws: AwsClients, sandbox: SandboxHandle
) -> None:
    recheck = ObservePlan(EndpointCadence.DESCRIBE, jobs=False)
    observed = await observe(aws, REGION, "cadence-test", jobs=["job-a"], plan=recheck, last=LAST)
    assert operations(sandbox, 0) == ["DescribeEndpoint"]
    assert observed.endpoint_described and not observed.complete
    assert observed.jobs == LAST.jobs  # Deploying reads the finished job's output from it


async def test_a_finished_resource_between_rechecks_makes_no_call(
    aws: AwsClients, sandbox: SandboxHandle
) -> None:
    idle = ObservePlan(EndpointCadence.LAST_SEEN, jobs=False)
    observed = await observe(aws, REGION, "cadence-test", jobs=["job-a"], plan=idle, last=LAST)
    assert operations(sandbox, 0) == []
    assert observed.endpoint == LAST.endpoint


async def test_without_a_last_observation_everything_is_described(
    aws: AwsClients, sandbox: SandboxHandle
) -> None:
    idle = ObservePlan(EndpointCadence.LAST_SEEN, jobs=False)
    observed = await observe(aws, REGION, "cadence-test", jobs=["job-a"], plan=idle, last=None)
    assert sorted(operations(sandbox, 0)) == ["DescribeEndpoint", "DescribeOptimizationJob"]
    assert observed.complete

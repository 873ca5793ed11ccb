"""The shard Job's object (controller/benchjobs.py): its name, its spec, its status read."""

from __future__ import annotations

from endpoint_optimizer.bench.limits import BenchLimits
from endpoint_optimizer.bench.models import BenchConfig, BenchTarget
from endpoint_optimizer.controller.benchjobs import (
    JobLauncher,
    failed_indexes,
    run_name,
    shard_launcher,
)
from endpoint_optimizer.controller.options import BenchJobs, OperatorOptions
from endpoint_optimizer.sagemaker.naming import Owner

OWNER = Owner("ml", "Chat.Llama-8B", "uid-1")
TARGETS = [BenchTarget(endpoint_name="e", variant="baseline")]


def test_the_run_name_is_deterministic_per_measurement_level_and_a_dns_label() -> None:
    config = BenchConfig(concurrency=[64, 256], requests=200)
    name = run_name(OWNER, TARGETS, config, 1, 4)
    assert name == run_name(OWNER, TARGETS, config.model_copy(update={"run_id": "x"}), 1, 4)
    assert name.startswith("chat-llama-8b-bench-") and len(name) <= 63
    others = {
        run_name(OWNER, TARGETS, config, 0, 4),
        run_name(OWNER, TARGETS, config.model_copy(update={"seed": 7}), 1, 4),
        run_name(Owner("ml", "Chat.Llama-8B", "uid-2"), TARGETS, config, 1, 4),
    }
    assert name not in others and len(others) == 3


def test_the_job_is_indexed_owned_and_runs_the_shard_command() -> None:
    launcher = JobLauncher(OWNER, image="img:1", service_account="eo")
    job = launcher.job("run-a", 4, 900.2)
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 4
    assert spec["backoffLimitPerIndex"] == 0 and spec["activeDeadlineSeconds"] == 901
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "eo" and pod["restartPolicy"] == "Never"
    [container] = pod["containers"]
    assert container["image"] == "img:1"
    assert container["command"] + container["args"] == [
        "endpoint-optimizer",
        "bench",
        "--shard",
        "$(JOB_COMPLETION_INDEX)/4",
        "--plan-configmap",
        "ml/run-a",
    ]
    assert not any("SECRET" in e["name"] or "KEY" in e["name"] for e in container["env"])


def test_failed_indexes_are_read_as_the_job_controller_writes_them() -> None:
    assert failed_indexes(None) == set()
    assert failed_indexes("1,3-5,9") == {1, 3, 4, 5, 9}


def test_the_job_path_is_off_unless_configured() -> None:
    assert shard_launcher(OperatorOptions(), OWNER) is None
    on = OperatorOptions(bench=BenchLimits(max_shards=4), bench_jobs=BenchJobs("img", "eo"))
    assert isinstance(shard_launcher(on, OWNER), JobLauncher)
    half = OperatorOptions(bench_jobs=BenchJobs("img", "eo"))
    assert shard_launcher(half, OWNER) is None

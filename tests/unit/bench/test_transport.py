"""Shard results through ConfigMaps (bench.transport): exact, compressed, split under 1 MiB."""

from __future__ import annotations

import json
import random

from endpoint_optimizer.bench import transport
from endpoint_optimizer.bench.models import BenchTarget, LevelPart, RequestSample, Validity
from endpoint_optimizer.bench.shards import ShardResult, ShardVariant
from endpoint_optimizer.bench.stats import distribution

OWNER = [
    {
        "apiVersion": "optimizer.dev/v1alpha1",
        "kind": "OptimizedEndpoint",
        "name": "o",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": False,
    }
]


def _result(requests: int, tokens: int, shard: int = 1) -> ShardResult:
    rng = random.Random(requests)
    samples = []
    for i in range(requests):
        gaps = [rng.uniform(0.005, 0.02) for _ in range(tokens - 1)]
        offsets = [sum(gaps[:k]) for k in range(tokens)]
        samples.append(
            RequestSample(
                index=i,
                inference_id=f"run-c8-{i}",
                scheduled_at=rng.random(),
                sent_at=rng.random(),
                end_at=rng.random() + 3,
                client_queue_s=rng.random() / 100,
                ttft_s=rng.random(),
                e2e_s=rng.random() + 3,
                tpot_s=rng.random() / 50,
                itl_s=gaps,
                chunk_gaps_s=gaps,
                chunk_offsets_s=offsets,
                chunk_tokens=[1] * tokens,
                output_tokens=tokens,
            )
        )
    empty = distribution([])
    return ShardResult(
        run_id="run",
        level_index=0,
        concurrency=8,
        shard=shard,
        shards=2,
        start_at=1.5e9,
        variants=[
            ShardVariant(
                target=BenchTarget(endpoint_name="e"),
                part=LevelPart(samples=samples, send_lags={i: 0.001 * i for i in range(requests)}),
                validity=Validity(valid=True, send_lag_s=empty, loop_lag_s=empty, wake_lag_s=empty),
            )
        ],
    )


def test_a_small_result_is_one_configmap_and_reads_back_exactly() -> None:
    result = _result(20, 16)
    [cm] = transport.result_configmaps("job-x", "ml", result, OWNER)
    assert cm["metadata"]["name"] == "job-x-s1-p0"
    assert cm["metadata"]["ownerReferences"] == OWNER
    assert len(json.dumps(cm)) < transport.CONFIGMAP_LIMIT
    [back], problems = transport.results_from_configmaps([cm])
    assert problems == {}
    assert back == result  # floats survive JSON exactly (shortest round-trip repr)


def test_a_large_result_is_split_in_parts_under_the_configmap_limit() -> None:
    result = _result(1500, 256)
    cms = transport.result_configmaps("job-x", "ml", result, OWNER)
    assert len(cms) > 1
    assert all(len(json.dumps(cm)) < transport.CONFIGMAP_LIMIT for cm in cms)
    [back], problems = transport.results_from_configmaps(list(reversed(cms)))
    assert problems == {} and back == result
    # A lost part is named, never a silent partial result.
    results, problems = transport.results_from_configmaps(cms[1:])
    assert results == [] and "incomplete" in problems[1]


def test_a_shard_writes_its_progress_only_when_it_moved_and_once_more_on_exit() -> None:
    written: list[dict[str, object]] = []
    writer = transport.ProgressWriter(
        namespace="ml",
        run="run-1",
        shard=2,
        warmup=3,
        owner_references=OWNER,
        interval_s=3600,  # the test flushes by hand; the thread never wakes
        write=written.append,
    )
    with writer:
        for index in range(3):  # warm-up requests are not counted
            writer.done(index)
        writer.flush()
        writer.done(3)
        writer.done(4)
        writer.flush()
        writer.flush()  # nothing moved: nothing written
        writer.done(5)
    counts = [int(body["data"]["done"]) for body in written]  # type: ignore[index]
    assert counts == [0, 2, 3]  # the last on exit
    body = written[-1]
    assert body["metadata"]["name"] == "run-1-s2-progress"  # type: ignore[index]
    assert transport.is_progress(body)
    assert body["metadata"]["ownerReferences"] == OWNER  # type: ignore[index]


def test_a_failed_progress_write_is_retried_and_never_stops_the_shard() -> None:
    attempts: list[int] = []

    def flaky(body: dict[str, object]) -> None:
        attempts.append(int(body["data"]["done"]))  # type: ignore[index]
        if len(attempts) == 1:
            raise ConnectionError("API server unreachable")

    writer = transport.ProgressWriter(
        namespace="ml", run="r", shard=0, warmup=0, owner_references=[], interval_s=3600,
        write=flaky,
    )  # fmt: skip
    writer.done(0)
    writer.flush()  # fails: logged, not raised
    writer.flush()  # the same count again: the failed one was not counted as written
    assert attempts == [1, 1]
    assert writer.written == 1


def test_the_coordinator_sums_the_shards_counts_and_ignores_what_it_cannot_read() -> None:
    counts = [
        transport.progress_configmap("r", "ml", shard, done, [])
        for shard, done in [(0, 5), (1, 7), (2, 0)]
    ]
    unreadable = transport.progress_configmap("r", "ml", 3, 1, [])
    unreadable["data"] = {"done": "many"}
    result = transport.result_configmaps("r", "ml", _result(4, 8, shard=0), [])
    assert transport.progress_from_configmaps([*counts, unreadable, *result]) == 12
    assert not any(transport.is_progress(cm) for cm in result)

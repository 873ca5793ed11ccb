"""A shard pod's progress count through the `kubernetes` client against the KMock emulator:
created, patched as it moves, and never re-created once the coordinator has cleaned the run
up (a pod that outlives its level leaves nothing behind)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from endpoint_optimizer.bench import transport
from endpoint_optimizer.demo.cluster import Cluster, running_cluster, write_kubeconfig

NAMESPACE = "ml"


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    with running_cluster() as (thread, cluster):
        cluster.create_namespace(NAMESPACE)
        monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(thread.url, tmp_path)))
        yield cluster


def _counts(cluster: Cluster) -> dict[str, str]:
    items = cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps")["items"]
    return {cm["metadata"]["name"]: cm["data"]["done"] for cm in items if transport.is_progress(cm)}


def test_a_count_is_created_then_patched_and_not_recreated_after_the_clean_up(
    cluster: Cluster,
) -> None:
    writer = transport.ProgressWriter(
        namespace=NAMESPACE,
        run="run-1",
        shard=1,
        warmup=0,
        owner_references=[],
        interval_s=3600,  # flushed by hand
    )
    writer.done(0)
    writer.flush()
    assert _counts(cluster) == {"run-1-s1-progress": "1"}
    writer.done(1)
    writer.done(2)
    writer.flush()
    assert _counts(cluster) == {"run-1-s1-progress": "3"}
    # A second writer for the same shard (the Job restarted its pod) takes the count over.
    again = transport.ProgressWriter(
        namespace=NAMESPACE, run="run-1", shard=1, warmup=0, owner_references=[], interval_s=3600
    )
    again.done(0)
    again.flush()
    assert _counts(cluster) == {"run-1-s1-progress": "1"}
    # The coordinator gives up on the level and deletes the run's ConfigMaps.
    cluster.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/configmaps/run-1-s1-progress")
    writer.done(3)
    writer.flush()
    assert writer.closed
    writer.done(4)
    writer.flush()
    assert _counts(cluster) == {}

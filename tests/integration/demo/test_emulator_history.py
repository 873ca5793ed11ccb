"""The emulator's request history holds only requests in flight, and routing still works.

KMock routes each request by finding it again in its whole request history (once per
reaction), so a history of every request served makes each request dearer than the
last: a long e2e run spent most of its process's CPU there (ApiServer._forget).
"""

from __future__ import annotations

import pytest

from endpoint_optimizer.demo.cluster import ApiError, running_cluster

CREATED = 300

NAMESPACE = "ml"


def test_served_requests_leave_the_history_and_every_kind_is_still_routed() -> None:
    with running_cluster() as (emulator, cluster):
        assert emulator.emulator is not None
        cluster.create_namespace(NAMESPACE)
        for i in range(CREATED):
            cluster.create_configmap(NAMESPACE, f"cm-{i}", {"i": str(i)})
        # Nothing is in flight between two requests of this one client.
        assert emulator.emulator._requests == []
        # Each kind of request still reaches its reaction: a read, a list, a conflict, a 404.
        assert cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps/cm-7")[
            "data"
        ] == {"i": "7"}
        listing = cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps")
        assert len(listing["items"]) == CREATED
        with pytest.raises(ApiError) as conflict:
            cluster.create_configmap(NAMESPACE, "cm-0", {"i": "again"})
        assert conflict.value.status == 409
        with pytest.raises(ApiError) as missing:
            cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps/absent")
        assert missing.value.status == 404

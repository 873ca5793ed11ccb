"""The pieces of the demo's API server that kubectl relies on, each on its own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from endpoint_optimizer.api.crd import crd_manifest
from endpoint_optimizer.demo import protobuf
from endpoint_optimizer.demo.kinds import Catalogue, field_problems, kind_from_crd
from endpoint_optimizer.demo.progress import scaled_text, verdict_counts
from endpoint_optimizer.demo.tables import age, json_path, table

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def catalogue() -> Catalogue:
    crd = crd_manifest()
    found = Catalogue()
    found.add(kind_from_crd(crd, crd["spec"]["versions"][0]))
    return found


def test_discovery_names_the_short_name_and_the_core_group_version() -> None:
    served = catalogue()
    core = served.resource_list("", "v1")
    assert core is not None and core["groupVersion"] == "v1"  # not "/v1"
    custom = served.resource_list("optimizer.dev", "v1alpha1")
    assert custom is not None
    (entry,) = [r for r in custom["resources"] if r["name"] == "optimizedendpoints"]
    assert entry["shortNames"] == ["oe"] and entry["namespaced"] is True
    aggregated = served.aggregated(core=False)
    groups = {item["metadata"]["name"] for item in aggregated["items"]}
    assert groups == {"apiextensions.k8s.io", "optimizer.dev"}


def test_openapi_v3_lists_field_validation_on_patch_and_the_crd_schema() -> None:
    served = catalogue()
    index = served.openapi_v3_index()["paths"]
    assert "apis/optimizer.dev/v1alpha1" in index and "api/v1" in index
    document = served.openapi_v3("apis/optimizer.dev/v1alpha1")
    assert document is not None
    schema = document["components"]["schemas"]["dev.optimizer.v1alpha1.OptimizedEndpoint"]
    assert schema["x-kubernetes-group-version-kind"][0]["kind"] == "OptimizedEndpoint"
    assert "spec" in schema["properties"]
    patch = document["paths"][
        "/apis/optimizer.dev/v1alpha1/namespaces/{namespace}/optimizedendpoints/{name}"
    ]["patch"]
    assert {"name": "fieldValidation", "in": "query", "uniqueItems": True,
            "schema": {"type": "string"}} in patch["parameters"]  # fmt: skip
    # Swagger 2.0 for clients that validate on their own, the same schema under definitions.
    v2 = served.openapi_v2()
    definition = v2["definitions"]["dev.optimizer.v1alpha1.OptimizedEndpoint"]
    assert definition["properties"]["metadata"] == {
        "$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    }
    assert "io.k8s.api.core.v1.ConfigMap" in v2["definitions"]


def test_field_validation_names_unknown_fields_types_and_enums() -> None:
    kind = catalogue().find("optimizer.dev", "v1alpha1", "optimizedendpoints")
    assert kind is not None
    problems = field_problems(
        kind,
        {
            "metadata": {"name": "x", "labelz": {}},
            "spec": {"benchmark": {"concurency": [1], "requests": "many"}, "objective": "fast"},
        },
    )
    assert 'unknown field "metadata.labelz"' in problems
    assert 'unknown field "spec.benchmark.concurency"' in problems
    assert any(p.startswith("spec.benchmark.requests: Invalid value") for p in problems)
    assert "spec.endpointName: Required value" in problems
    # A merge patch may leave out required fields and null a field out.
    assert field_problems(kind, {"spec": {"rollout": None}}, patch=True) == []


def test_printer_columns_follow_the_crd_and_dates_become_ages() -> None:
    kind = catalogue().find("optimizer.dev", "v1alpha1", "optimizedendpoints")
    assert kind is not None
    created = (NOW - timedelta(minutes=3, seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    obj = {
        "metadata": {"name": "chat", "namespace": "ml", "creationTimestamp": created},
        "spec": {"endpointName": "chat-demo"},
        "status": {
            "phase": "Analyzing",
            "objectiveGain": 0.229,
            "conditions": [
                {"type": "Ready", "message": "no"},
                {"type": "Progressing", "message": "canary step 2"},
            ],
        },
    }
    rendered = table(kind, [obj], resource_version="7", now=NOW)
    names = [c["name"] for c in rendered["columnDefinitions"]]
    assert names == [
        "Name",
        "Phase",
        "Endpoint",
        "Gain",
        "TTFT-p99",
        "Acceptance",
        "Age",
        "Message",
    ]
    assert rendered["rows"][0]["cells"] == [
        "chat", "Analyzing", "chat-demo", 0.229, None, None, "3m5s", "canary step 2",
    ]  # fmt: skip
    assert rendered["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert json_path(obj, '.status.conditions[?(@.type=="Ready")].message') == "no"
    assert age("2026-12-01T09:00:00Z", NOW) == "3h" and age(None, NOW) is None


def test_events_print_as_the_api_server_prints_them() -> None:
    kind = catalogue().find("", "v1", "events")
    assert kind is not None
    event = {
        "metadata": {"name": "chat.1"},
        "involvedObject": {"kind": "OptimizedEndpoint", "name": "chat"},
        "reason": "CandidatePromoted",
        "message": "done",
        "type": "Normal",
        "count": 3,
        "firstTimestamp": "2026-12-01T11:50:00Z",
        "lastTimestamp": "2026-12-01T11:59:00Z",
    }
    (row,) = table(kind, [event], resource_version="1", now=NOW)["rows"]
    assert row["cells"][:4] == ["60s (x3 over 10m)", "Normal", "CandidatePromoted",
                                "optimizedendpoint/chat"]  # fmt: skip


def _field(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2, len(payload)]) + payload


def test_the_protobuf_body_of_kubectl_create_configmap_is_read() -> None:
    metadata = _field(1, b"evals") + _field(3, b"ml") + _field(5, b"")
    entry = _field(1, b"items.jsonl") + _field(2, b'{"prompt": "hi"}')
    raw = _field(1, metadata) + _field(2, entry)
    type_meta = _field(1, b"v1") + _field(2, b"ConfigMap")
    body = protobuf.MAGIC + _field(1, type_meta) + _field(2, raw)
    assert protobuf.decode(body) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "evals", "namespace": "ml"},  # the empty uid is left out
        "data": {"items.jsonl": '{"prompt": "hi"}'},
    }


def test_scaled_durations_and_verdict_counts_say_what_the_demo_runs() -> None:
    text = "kept until 13:00Z (rollout.baselineRetention 1h); step 5m, job g1-63fd, 1m30s"
    assert scaled_text(text, 0.01) == (
        "kept until 13:00Z (rollout.baselineRetention 1h (36 s in the demo's scaled time)); "
        "step 5m (3.0 s in the demo's scaled time), job g1-63fd, "
        "1m30s (0.9 s in the demo's scaled time)"
    )
    assert scaled_text(text, None) == text
    checks = [{"verdict": "Pass"}, {"verdict": "Inconclusive"}, {"verdict": "Pass"}]
    assert verdict_counts(checks) == "2 passed, 1 inconclusive"

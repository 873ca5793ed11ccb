"""The Helm chart renders, lints and validates for every documented profile.

Rendering and lint use the real Helm library (helm-python-sdk); every rendered object
is checked with kubernetes-validate against Kubernetes 1.29 and the newest version it
knows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from tests.unit.chart.rendering import (
    CHART,
    PROFILES,
    REPO,
    Rendered,
    identity,
    profile_values,
    render,
)

KUBERNETES_VERSIONS = ("1.29", latest_version())
# prometheus-operator kinds: kubernetes-validate ships no schema for them.
PROMETHEUS_OPERATOR_GROUP = "monitoring.coreos.com"


@pytest.fixture(scope="module", params=PROFILES)
def profile(request: pytest.FixtureRequest) -> tuple[str, Rendered]:
    name: str = request.param
    return name, render(profile_values(name))


COMPONENT = "app.kubernetes.io/component"


def _component(rendered: Rendered, kind: str, component: str) -> dict[str, Any]:
    (found,) = [
        o for o in rendered.of_kind(kind) if o["metadata"]["labels"][COMPONENT] == component
    ]
    return found


def _operator(rendered: Rendered) -> dict[str, Any]:
    return _component(rendered, "Deployment", "operator")


def _container(rendered: Rendered) -> dict[str, Any]:
    (container,) = _operator(rendered)["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = container
    return result


def _env(rendered: Rendered) -> dict[str, str]:
    return {item["name"]: item.get("value", "") for item in _container(rendered)["env"]}


def test_profiles_folder_holds_exactly_the_documented_profiles() -> None:
    on_disk = {path.stem for path in (CHART / "profiles").glob("*.yaml")}
    assert on_disk == set(PROFILES) - {"default"}


@pytest.mark.parametrize("profile_name", PROFILES)
@pytest.mark.parametrize(
    "kube_version", [f"v{v}.0" if v.count(".") == 1 else f"v{v}" for v in KUBERNETES_VERSIONS]
)
def test_helm_lint_is_clean_in_strict_mode(profile_name: str, kube_version: str) -> None:
    report = helm.lint(
        CHART, profile_values(profile_name), strict=True, namespace="ops", kube_version=kube_version
    )
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_rendered_object_validates_against_kubernetes(
    profile: tuple[str, Rendered], version: str
) -> None:
    name, rendered = profile
    assert rendered.objects, f"profile {name} rendered nothing"
    checked = 0
    for obj in rendered.objects:
        where = f"{name}: {identity(obj)} from {rendered.sources[identity(obj)]}"
        if obj["apiVersion"].startswith(PROMETHEUS_OPERATOR_GROUP + "/"):
            with pytest.raises(kubernetes_validate.SchemaNotFoundError):
                kubernetes_validate.validate(obj, version, strict=True)
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{where} is invalid for Kubernetes {version}: {error.message}")
        checked += 1
    assert checked >= 4, f"{name}: only {checked} objects validated"


def test_one_replica_replaced_with_recreate(profile: tuple[str, Rendered]) -> None:
    _, rendered = profile
    spec = _operator(rendered)["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}


def test_deployment_args_parse_with_the_run_command(profile: tuple[str, Rendered]) -> None:
    # The image's entrypoint is `endpoint-optimizer run`: its click command must accept
    # exactly the flags the chart passes (parsed only, not run).
    from endpoint_optimizer.controller.run import run_command

    _, rendered = profile
    context = run_command.make_context("run", list(_container(rendered)["args"]))
    assert context.params["metrics_port"] == 8080
    assert context.params["liveness"] == "http://0.0.0.0:8081/healthz"


def test_pods_run_locked_down(profile: tuple[str, Rendered]) -> None:
    _, rendered = profile
    for deployment in rendered.of_kind("Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        (container,) = pod["containers"]
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert "privileged" not in security
        assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]


def test_probes_point_at_kopf_liveness_and_metrics_ports() -> None:
    rendered = render()
    container = _container(rendered)
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    assert "--liveness=http://0.0.0.0:8081/healthz" in container["args"]
    assert "--metrics-port=8080" in container["args"]
    service = _component(rendered, "Service", "operator")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def test_cluster_wide_install_watches_all_namespaces_with_a_cluster_role() -> None:
    rendered = render(profile_values("cluster-wide"))
    assert "--all-namespaces" in _container(rendered)["args"]
    assert [role["metadata"]["name"] for role in rendered.of_kind("ClusterRole")] == [
        "eo-endpoint-optimizer"
    ]
    assert rendered.of_kind("Role") == [] and rendered.of_kind("RoleBinding") == []
    (binding,) = rendered.of_kind("ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "eo-endpoint-optimizer", "namespace": "optimizer-system"}
    ]


def test_namespaced_install_gets_a_role_per_watched_namespace() -> None:
    values = profile_values("namespaced")
    rendered = render(values)
    args = _container(rendered)["args"]
    assert "--all-namespaces" not in args
    assert [a for a in args if a.startswith("--namespace=")] == [
        f"--namespace={ns}" for ns in values["watchNamespaces"]
    ]
    roles = rendered.of_kind("Role")
    bindings = rendered.of_kind("RoleBinding")
    assert sorted(r["metadata"]["namespace"] for r in roles) == sorted(values["watchNamespaces"])
    assert sorted(b["metadata"]["namespace"] for b in bindings) == sorted(values["watchNamespaces"])
    # Cluster-scoped grants are only kopf's read-only scan.
    (scanning,) = rendered.of_kind("ClusterRole")
    verbs = {verb for rule in scanning["rules"] for verb in rule["verbs"]}
    assert verbs == {"list", "watch"}


def test_namespaced_install_without_scanning_grants_nothing_cluster_wide() -> None:
    rendered = render({"watchNamespaces": ["ml"], "rbac": {"kopfScanning": False}})
    assert rendered.of_kind("ClusterRole") == [] and rendered.of_kind("ClusterRoleBinding") == []


def test_service_account_carries_irsa_annotation() -> None:
    rendered = render(profile_values("namespaced"))
    annotations = rendered.one("ServiceAccount")["metadata"]["annotations"]
    assert annotations["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    pod = _operator(rendered)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == rendered.one("ServiceAccount")["metadata"]["name"]


def test_aws_region_and_no_endpoint_override_by_default() -> None:
    env = _env(render())
    assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "us-east-1"
    assert "AWS_ENDPOINT_URL" not in env
    assert "AWS_ACCESS_KEY_ID" not in env
    assert {"--log-level=INFO", "--log-json"} <= set(_container(render())["args"])


@pytest.mark.parametrize(("values", "expected"), [({}, 4), ({"measureConcurrency": 16}, 16)])
def test_measure_concurrency_reaches_the_run_command_through_its_env_var(
    values: dict[str, Any], expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from endpoint_optimizer.controller.run import run_command

    rendered = render(values)
    env = _env(rendered)
    # What the container's `run` would read: the chart's env, parsed by the click command.
    monkeypatch.setenv(
        "ENDPOINT_OPTIMIZER_MEASURE_CONCURRENCY", env["ENDPOINT_OPTIMIZER_MEASURE_CONCURRENCY"]
    )
    params = run_command.make_context("run", list(_container(rendered)["args"])).params
    assert params["measure_concurrency"] == expected
    assert not any(a.startswith("--measure-concurrency") for a in _container(rendered)["args"])


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, (256, 64, 4, 20_000.0)),
        (
            {
                "benchmark": {
                    "maxStreams": 64,
                    "streamsPerWorker": 16,
                    "maxWorkers": 0,
                    "maxTokensPerSecond": 5_000,
                }
            },
            (64, 16, 0, 5_000.0),
        ),
        ({"benchmark": {"maxTokensPerSecond": 0}}, (256, 64, 4, 0.0)),
    ],
)
def test_benchmark_limits_reach_the_run_command_through_their_env_vars(
    values: dict[str, Any],
    expected: tuple[int, int, int, float],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from endpoint_optimizer.controller.run import run_command

    rendered = render(values)
    env = _env(rendered)
    names = ("MAX_STREAMS", "STREAMS_PER_WORKER", "MAX_WORKERS", "MAX_TOKENS_PER_SECOND")
    for name in names:
        monkeypatch.setenv(
            f"ENDPOINT_OPTIMIZER_BENCH_{name}", env[f"ENDPOINT_OPTIMIZER_BENCH_{name}"]
        )
    params = run_command.make_context("run", list(_container(rendered)["args"])).params
    got = (
        params["bench_max_streams"],
        params["bench_streams_per_worker"],
        params["bench_max_workers"],
        params["bench_max_tokens_per_second"],
    )
    assert got == expected


@pytest.mark.parametrize(
    ("values", "prices", "look_up"),
    [
        ({}, {}, True),
        (
            {
                "pricing": {
                    "lookUp": False,
                    "usdPerInstanceHour": {
                        "ml.p5en.48xlarge": 60,
                        "eu-west-1/ml.g6e.2xlarge": 3.1,
                    },
                }
            },
            {"ml.p5en.48xlarge": 60.0, "eu-west-1/ml.g6e.2xlarge": 3.1},
            False,
        ),
    ],
)
def test_instance_prices_reach_the_run_command_through_their_env_vars(
    values: dict[str, Any],
    prices: dict[str, float],
    look_up: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from endpoint_optimizer.controller.run import run_command
    from endpoint_optimizer.pipeline.pricing import parse_table

    rendered = render(values)
    env = _env(rendered)
    for name in ("INSTANCE_PRICES", "PRICE_LOOKUP"):
        monkeypatch.setenv(f"ENDPOINT_OPTIMIZER_{name}", env[f"ENDPOINT_OPTIMIZER_{name}"])
    params = run_command.make_context("run", list(_container(rendered)["args"])).params
    assert parse_table(params["instance_prices"]) == prices
    assert params["price_lookup"] is look_up


# Measured by benchmarks/bench_limits.py and bench_scale.py (docs/resilience.md, Isolation):
# the operator's own peak at 200 resources, and one spawned benchmark client process.
OPERATOR_PEAK_MIB = 150
CLIENT_PROCESS_MIB = 60


def _mebibytes(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()  # type: ignore[union-attr]
    return float(number) * (1024 if unit == "Gi" else 1)


def test_the_default_memory_limit_covers_the_default_benchmark_limits() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    bench = values["benchmark"]
    limit = _mebibytes(values["resources"]["limits"]["memory"])
    # Every client process the budget may hold at once, plus the resource tracker.
    needed = OPERATOR_PEAK_MIB + (bench["maxWorkers"] + 1) * CLIENT_PROCESS_MIB
    assert limit >= 1.5 * needed, f"{limit} MiB for {needed} MiB at the benchmark limits"


def test_sandbox_profile_runs_the_sandbox_and_points_aws_calls_at_it() -> None:
    from endpoint_optimizer.controller.run import run_command
    from endpoint_optimizer.demo.cli import serve_command

    rendered = render(profile_values("sandbox"))
    service = _component(rendered, "Service", "sandbox")
    (port,) = service["spec"]["ports"]
    env = _env(rendered)
    assert env["AWS_ENDPOINT_URL"] == (
        f"http://{service['metadata']['name']}.optimizer-system.svc:{port['port']}"
    )
    assert env["AWS_ACCESS_KEY_ID"] == "sandbox"
    operator_args = run_command.make_context("run", list(_container(rendered)["args"])).params
    assert operator_args["log_level"] == "DEBUG" and operator_args["log_json"] is False
    pod = _component(rendered, "Deployment", "sandbox")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    (sandbox,) = pod["containers"]
    assert sandbox["command"] == ["endpoint-optimizer", "sandbox", "serve"]
    serve = serve_command.make_context("serve", list(sandbox["args"])).params
    assert serve["host"] == "0.0.0.0" and serve["port"] == port["port"]
    assert serve["time_scale"] == operator_args["time_scale"] == 0.05
    # The sandbox's pods are not behind the operator's metrics Service, and vice versa.
    for kind_a, kind_b in (("operator", "sandbox"), ("sandbox", "operator")):
        selector = _component(rendered, "Service", kind_a)["spec"]["selector"]
        labels = _component(rendered, "Deployment", kind_b)["spec"]["template"]["metadata"][
            "labels"
        ]
        assert not selector.items() <= labels.items()


def test_sandbox_elsewhere_needs_its_url() -> None:
    rendered = render({"sandbox": {"enabled": True, "deploy": False, "endpointUrl": "http://sb:1"}})
    assert _env(rendered)["AWS_ENDPOINT_URL"] == "http://sb:1"
    assert [d["metadata"]["name"] for d in rendered.of_kind("Deployment")] == [
        "eo-endpoint-optimizer"
    ]
    with pytest.raises(helm.HelmRenderError, match=r"sandbox\.endpointUrl"):
        render({"sandbox": {"enabled": True, "deploy": False}})


def test_monitoring_objects_only_when_enabled() -> None:
    plain = render()
    assert plain.of_kind("ServiceMonitor") == [] and plain.of_kind("PrometheusRule") == []
    monitored = render(profile_values("monitoring"))
    monitor = monitored.one("ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    service = _component(monitored, "Service", "operator")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    rule = monitored.one("PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    expressions = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert expressions, "the PrometheusRule has no rules"
    # A ServiceMonitor's targets get job=<Service name>: any job selector must use it.
    for expression in expressions:
        for job in re.findall(r'job="([^"]*)"', expression):
            assert job == service["metadata"]["name"], expression


def test_dashboard_configmap_carries_every_dashboard_with_the_sidecar_label() -> None:
    dashboards = sorted((CHART / "dashboards").glob("*.json"))
    rendered = render(profile_values("monitoring"))
    maps = [
        cm for cm in rendered.of_kind("ConfigMap") if cm["metadata"]["name"].endswith("-dashboards")
    ]
    if not dashboards:
        assert maps == [], "a dashboard ConfigMap without dashboards"
        return
    (configmap,) = maps
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert sorted(configmap["data"]) == [path.name for path in dashboards]
    for path in dashboards:
        assert json.loads(configmap["data"][path.name]) == json.loads(path.read_text())


def test_notes_say_how_to_apply_the_first_resource() -> None:
    notes = render(profile_values("namespaced")).notes
    assert "kubectl apply" in notes
    manifest = notes.split("cat <<'YAML' | kubectl apply -f -", 1)[1].split("YAML", 1)[0]
    resource = yaml.safe_load("\n".join(line[5:] for line in manifest.splitlines()))
    assert resource["kind"] == "OptimizedEndpoint"
    assert resource["apiVersion"] == "optimizer.dev/v1alpha1"
    assert resource["metadata"]["namespace"] == "ml-serving"
    # The same resource passes the CRD's schema and CEL rules and the operator's parser.
    from endpoint_optimizer.api import parse_spec
    from tests.unit.api.admission import admit

    admitted, problems = admit(resource)
    assert problems == []
    assert parse_spec(admitted["spec"]).endpoint_name == "llama-8b-chat"


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"replicaCount": 2}, "replicaCount"),
        ({"watchNamespaces": ["Not_A_Namespace"]}, "/watchNamespaces/0"),
        ({"securityContext": {"readOnlyRootFilesystem": False}}, "/securityContext"),
        ({"podSecurityContext": {"runAsNonRoot": False}}, "/podSecurityContext/runAsNonRoot"),
        ({"logLevel": "TRACE"}, "/logLevel"),
        ({"aws": {"region": "mars"}}, "/aws/region"),
        ({"measureConcurrency": 0}, "/measureConcurrency"),
        ({"measureConcurrency": 65}, "/measureConcurrency"),
        ({"measureConcurrency": 2.5}, "/measureConcurrency"),
        ({"benchmark": {"maxStreams": 1}}, "/benchmark/maxStreams"),
        ({"benchmark": {"maxWorkers": 65}}, "/benchmark/maxWorkers"),
        ({"benchmark": {"streams": 8}}, "benchmark"),
        ({"pricing": {"usdPerInstanceHour": {"ml.p5en.48xlarge": -1}}}, "usdPerInstanceHour"),
        ({"pricing": {"usdPerInstanceHour": {"p5en": 60}}}, "usdPerInstanceHour"),
        ({"pricing": {"lookUp": "yes"}}, "/pricing/lookUp"),
    ],
)
def test_schema_rejects_bad_values_naming_the_field(values: dict[str, Any], field: str) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        render(values)
    assert field in str(caught.value)


def test_schema_documents_every_default_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(defaults) == set(schema["properties"])


def test_chart_metadata_requires_kubernetes_1_29() -> None:
    with helm.Chart.load(CHART) as chart:
        assert chart.metadata["kubeVersion"] == ">=1.29.0-0"
        assert chart.metadata["appVersion"] == _project_version()


def _project_version() -> str:
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    version: str = project["project"]["version"]
    return version


def test_packaged_chart_renders_like_the_folder(tmp_path: Path) -> None:
    archive = Path(helm.package(CHART, destination=tmp_path))
    assert archive.name == "endpoint-optimizer-0.1.0.tgz"
    values = profile_values("monitoring")
    with helm.Chart.load(archive) as packaged, helm.Chart.load(CHART) as folder:
        assert [crd["name"] for crd in packaged.crds] == [crd["name"] for crd in folder.crds]
        assert packaged.render(values, name="eo", namespace="ns") == folder.render(
            values, name="eo", namespace="ns"
        )


def test_execution_roles_reach_the_run_command_and_none_means_any() -> None:
    from endpoint_optimizer.controller.run import run_command

    roles = [
        "arn:aws:iam::123456789012:role/endpoint-optimizer-execution-a",
        "arn:aws:iam::123456789012:role/endpoint-optimizer-execution-b",
    ]
    rendered = render({"aws": {"region": "us-east-1", "executionRoleArns": roles}})
    params = run_command.make_context("run", list(_container(rendered)["args"])).params
    assert list(params["execution_roles"]) == roles
    default = run_command.make_context("run", list(_container(render())["args"])).params
    assert default["execution_roles"] == ()

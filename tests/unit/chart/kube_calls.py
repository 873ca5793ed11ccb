"""The Kubernetes permissions the operator needs, read from its source code.

Three sources, each turned into (apiGroup, resource, verb) triples:

- kopf's handler decorators (`@kopf.timer(GROUP, VERSION, PLURAL)`, `@kopf.on.delete(...)`,
  `@kopf.index("configmaps")`, ...): kopf lists and watches the resource and patches it
  (finalizers, progress annotations); `patch.status` in the code means a patch of the
  status subresource;
- Events: `kopf.event/info/warn/exception`, and kopf's own posting of handler progress;
- explicit API calls: Kubernetes REST paths in the code (`/api/v1/namespaces/{ns}/configmaps`)
  with the HTTP method of the call they are passed to, and kubernetes-client style
  methods (`read_namespaced_config_map`, `patch_namespaced_custom_object_status`, ...).

kopf's own needs come from its source (kopf/_core/reactor/observation.py): it watches
CustomResourceDefinitions, and lists/watches namespaces only when it serves a list of
namespaces rather than the whole cluster; peering objects only when not standalone.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

Rule = tuple[str, str, str]  # (apiGroup, resource, verb)

KOPF_RESOURCE_DECORATORS = frozenset(
    {
        "timer",
        "daemon",
        "index",
        "resume",
        "create",
        "update",
        "delete",
        "field",
        "event",
        "validate",
        "mutate",
    }
)
KOPF_EVENT_FUNCTIONS = frozenset({"event", "info", "warn", "exception"})
_HTTP_VERBS = {
    "get": "get",
    "post": "create",
    "patch": "patch",
    "put": "update",
    "delete": "delete",
}
_CLIENT_VERBS = {
    "read": "get",
    "list": "list",
    "create": "create",
    "patch": "patch",
    "replace": "update",
    "delete": "delete",
}
_CORE_RESOURCES = {
    "config_map": "configmaps",
    "event": "events",
    "namespace": "namespaces",
    "secret": "secrets",
}
# kubernetes-client methods of other API groups (BatchV1Api: create_namespaced_job, ...).
_GROUP_RESOURCES = {"job": ("batch", "jobs")}
_PATH = re.compile(
    r"/(?:api/v1|apis/(?P<group>[^/{}]+)/[^/{}]+)"
    r"(?:/namespaces/(?:\{[^}]*\}|[^/{}]+))?/(?P<resource>[a-z0-9.]+)"
    r"(?P<name>/(?:\{[^}]*\}|[^/{}?]+))?(?P<sub>/[a-z]+)?"
)


@dataclass(frozen=True)
class Needs:
    """What the operator's code asks of the Kubernetes API."""

    namespaced: frozenset[Rule]  # inside each namespace it serves
    standalone: bool  # kopf.operator(standalone=True): no peering objects
    evidence: dict[Rule, list[str]]


def _constants(package: Path) -> dict[str, object]:
    """Module-level constants of the package's __init__ (GROUP, VERSION, PLURAL, ...)."""
    found: dict[str, object] = {}
    tree = ast.parse((package / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def _evaluate(node: ast.expr, names: dict[str, object]) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(_evaluate(element, names) for element in node.elts)
    if isinstance(node, ast.JoinedStr):
        return "".join(
            str(_evaluate(part.value, names))
            if isinstance(part, ast.FormattedValue)
            else str(part.value)
            for part in node.values
            if isinstance(part, ast.Constant | ast.FormattedValue)
        )
    return None


def _module_names(tree: ast.Module, constants: dict[str, object]) -> dict[str, object]:
    names = dict(constants)
    for node in tree.body:
        if isinstance(node, ast.Assign):
            value = _evaluate(node.value, names)
            for target in node.targets:
                if isinstance(target, ast.Name) and value is not None:
                    names[target.id] = value
    return names


def _kopf_attribute(func: ast.expr) -> str | None:
    """'timer' for kopf.timer, 'delete' for kopf.on.delete; None otherwise."""
    if not isinstance(func, ast.Attribute):
        return None
    base = func.value
    if isinstance(base, ast.Name) and base.id == "kopf":
        return func.attr
    if (
        isinstance(base, ast.Attribute)
        and base.attr == "on"
        and isinstance(base.value, ast.Name)
        and base.value.id == "kopf"
    ):
        return func.attr
    return None


def _decorator_resource(call: ast.Call, names: dict[str, object], where: str) -> tuple[str, str]:
    """(apiGroup, plural) from a kopf decorator's positional or keyword arguments."""
    positional: list[object] = []
    for arg in call.args:
        if isinstance(arg, ast.Starred):
            value = _evaluate(arg.value, names)
            if not isinstance(value, tuple):
                raise AssertionError(f"{where}: cannot resolve the resource of a kopf decorator")
            positional.extend(value)
        else:
            positional.append(_evaluate(arg, names))
    keywords = {kw.arg: _evaluate(kw.value, names) for kw in call.keywords if kw.arg}
    group = keywords.get("group")
    plural = keywords.get("plural")
    if len(positional) == 3:
        group, _, plural = positional
    elif len(positional) == 2:  # ("v1", "configmaps") or ("group/version", "plural")
        api_version, plural = positional
        group = str(api_version).rpartition("/")[0] if "/" in str(api_version) else ""
    elif len(positional) == 1:
        plural = positional[0]
        group = group or ""
    if not isinstance(plural, str) or not isinstance(group, str):
        raise AssertionError(f"{where}: cannot resolve the resource of a kopf decorator")
    return group, plural


def _call_verb(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        if func.attr in _HTTP_VERBS:
            return _HTTP_VERBS[func.attr]
        if func.attr == "request" and call.args and isinstance(call.args[0], ast.Constant):
            return _HTTP_VERBS.get(str(call.args[0].value).lower())
    return None


def _client_method(name: str) -> Rule | None:
    """kubernetes-client style method names: read_namespaced_config_map -> configmaps get."""
    match = re.fullmatch(
        r"(read|list|create|patch|replace|delete)_(?:namespaced_)?(\w+?)(_status)?(?:_for_all_namespaces)?",
        name,
    )
    if not match:
        return None
    group, resource = "", _CORE_RESOURCES.get(match.group(2))
    if resource is None and match.group(2) in _GROUP_RESOURCES:
        group, resource = _GROUP_RESOURCES[match.group(2)]
    if resource is None:
        return None
    resource += "/status" if match.group(3) else ""
    return (group, resource, _CLIENT_VERBS[match.group(1)])


def scan(package: Path, files: Iterable[Path] | None = None) -> Needs:
    """What the given files (default: every file of the package) ask of the API."""
    constants = _constants(package)
    evidence: dict[Rule, list[str]] = {}
    standalone = False
    handled: set[tuple[str, str]] = set()
    writes_status = False

    def need(rule: Rule, where: str) -> None:
        evidence.setdefault(rule, []).append(where)

    for path in sorted(package.rglob("*.py") if files is None else files):
        relative = path.relative_to(package)
        tree = ast.parse(path.read_text(), str(path))
        names = _module_names(tree, constants)
        for node in ast.walk(tree):
            where = f"{relative}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for decorator in node.decorator_list:
                    if isinstance(decorator, ast.Call):
                        kind = _kopf_attribute(decorator.func)
                        if kind in KOPF_RESOURCE_DECORATORS:
                            group, plural = _decorator_resource(decorator, names, where)
                            if kind != "index":  # an index only reads; others get a patch
                                handled.add((group, plural))
                            verbs = (
                                ("list", "watch") if kind == "index" else ("list", "watch", "patch")
                            )
                            for verb in verbs:
                                need((group, plural, verb), where)
            elif isinstance(node, ast.Call):
                kind = _kopf_attribute(node.func)
                if (
                    kind in KOPF_EVENT_FUNCTIONS
                    and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)  # kopf.event, not kopf.on.event
                ):
                    need(("", "events", "create"), where)
                if kind == "operator":
                    standalone = any(
                        kw.arg == "standalone" and _evaluate(kw.value, names) is True
                        for kw in node.keywords
                    )
                verb = _call_verb(node)
                if verb is not None:
                    for arg in [*node.args, *(kw.value for kw in node.keywords)]:
                        text = _evaluate(arg, names)
                        match = _PATH.search(text) if isinstance(text, str) else None
                        if match:
                            resource = match.group("resource") + (match.group("sub") or "")
                            api_verb = verb
                            if verb == "get" and not match.group("name"):
                                watched = any(
                                    kw.arg == "params" for kw in node.keywords
                                ) and "watch" in ast.unparse(node)
                                api_verb = "watch" if watched else "list"
                            need((match.group("group") or "", resource, api_verb), where)
                if isinstance(node.func, ast.Attribute):
                    rule = _client_method(node.func.attr)
                    if rule is not None:
                        need(rule, where)
            elif (
                isinstance(node, ast.Attribute)
                and node.attr == "status"
                and isinstance(node.value, ast.Name)
                and node.value.id == "patch"
            ):
                writes_status = True
                need(("", "<handled>/status", "patch"), where)
    # kopf writes status through the status subresource of the resources it patches.
    status_where = evidence.pop(("", "<handled>/status", "patch"), [])
    if writes_status:
        for group, plural in sorted(handled):
            evidence[(group, f"{plural}/status", "patch")] = status_where
    return Needs(namespaced=frozenset(evidence), standalone=standalone, evidence=evidence)


def kopf_framework_needs(*, clusterwide: bool, scanning: bool) -> tuple[set[Rule], set[Rule]]:
    """(namespaced, cluster-scoped) rules kopf itself needs, by its source."""
    namespaced: set[Rule] = {("", "events", "create")}  # kopf posts handler progress
    cluster: set[Rule] = set()
    if scanning:
        cluster |= {
            ("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("list", "watch")
        }
        if not clusterwide:
            cluster |= {("", "namespaces", v) for v in ("list", "watch")}
    return namespaced, cluster

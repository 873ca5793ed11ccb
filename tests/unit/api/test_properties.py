"""Property tests: arbitrary input gives a valid spec or a SpecError, never anything else;
what the model accepts, the CRD accepts too, and what the CRD accepts, the model accepts."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from endpoint_optimizer.api import OptimizedEndpointSpec, SpecError, parse_spec
from endpoint_optimizer.sagemaker.matrix import RULES, check_optimizations

from .admission import REPO, admit

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**40), max_value=2**40)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)

FIELD_NAMES = sorted(
    {f.alias or n for n, f in OptimizedEndpointSpec.model_fields.items()} | {"bogus"}
)

# Values that sit on or near the boundaries and enums of the spec.
INTERESTING = st.sampled_from(
    [
        None,
        0,
        -1,
        1,
        2,
        8,
        16,
        100,
        101,
        0.0,
        0.5,
        1.5,
        "",
        "x",
        "a" * 64,
        "5m",
        "0s",
        "1h30m",
        "fp8",
        "awq",
        "gptq",
        "rtn",
        "W8A8",
        "ngram",
        "eagle",
        "draftModel",
        "shadow",
        "canary",
        "blueGreen",
        "optimizationJob",
        "llmCompressor",
        "beforePromotion",
        "s3://bucket/x/",
        "ml.g5.12xlarge",
        "ml.inf2.48xlarge",
        "ml.g4dn.xlarge",
        "ml.m5.large",
        "ml.p5.48xlarge",
        {"tensorParallelDegree": 8},
        [],
        {},
        [1, 8],
        [{"weight": 10}, {"weight": 50}],
        {"hfModelId": "org/name"},
    ]
)


def _examples() -> list[dict[str, Any]]:
    specs = []
    for path in sorted(Path(REPO / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc and doc["kind"] == "OptimizedEndpoint":
                specs.append(doc["spec"])
    return specs


EXAMPLES = _examples()


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, (*prefix, index))
    return found


# Drawn values are copied before they go into a spec: INTERESTING holds shared lists and
# dicts, and a later mutation must not change what hypothesis replays.
@st.composite
def mutated_specs(draw: st.DrawFn) -> dict[str, Any]:
    spec = copy.deepcopy(draw(st.sampled_from(EXAMPLES)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = [p for p in _paths(spec) if p]
        path = draw(st.sampled_from(paths))
        parent: Any = spec
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "interesting", "delete", "add"]))
        if action == "delete":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(FIELD_NAMES))] = copy.deepcopy(draw(INTERESTING))
        elif action == "interesting":
            parent[path[-1]] = copy.deepcopy(draw(INTERESTING))
        else:
            parent[path[-1]] = copy.deepcopy(draw(JSON))
    return spec


def _resource(spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "optimizer.dev/v1alpha1",
        "kind": "OptimizedEndpoint",
        "metadata": {"name": "x", "namespace": "ml"},
        "spec": spec,
    }


def _known_gap(spec: Any) -> bool:
    """Inputs the CRD cannot refuse but the model does: environment variable names (map
    keys have no pattern in a structural schema; documented in test_bad_input)."""
    model = spec.get("model") if isinstance(spec, dict) else None
    return isinstance(model, dict) and bool(model.get("environment"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON)
def test_arbitrary_values_give_a_spec_or_a_spec_error(value: Any) -> None:
    try:
        parse_spec(value)
    except SpecError as error:
        assert error.problems and all(p.path.startswith("spec") for p in error.problems)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(FIELD_NAMES), JSON | INTERESTING, max_size=8))
def test_arbitrary_top_level_fields_give_a_spec_or_a_spec_error(value: dict[str, Any]) -> None:
    try:
        parse_spec(value)
    except SpecError as error:
        assert error.problems


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_specs())
def test_model_and_crd_agree_on_mutated_examples(spec: dict[str, Any]) -> None:
    try:
        parsed = parse_spec(spec)
    except SpecError as error:
        assert error.problems and all(p.message for p in error.problems)
        parsed = None
    defaulted, crd_problems = admit(_resource(copy.deepcopy(spec)))

    if parsed is not None:
        # What the model accepts, the apiserver accepts, before and after a round trip.
        assert crd_problems == [], crd_problems
        dumped = parsed.dump()
        assert parse_spec(dumped) == parsed
        assert admit(_resource(dumped))[1] == []
        # The matrix judges any valid spec without raising, and each refusal is usable.
        for violation in check_optimizations(parsed):
            assert violation.rule in RULES and violation.field.startswith("spec.")
            assert violation.allowed and violation.message
    if not crd_problems and not _known_gap(spec):
        # What the apiserver stores (nulls pruned, defaults filled) the operator can run,
        # and it means the same as what the user wrote.
        stored = parse_spec(defaulted["spec"])
        assert parsed is None or stored == parsed

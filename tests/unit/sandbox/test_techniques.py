"""The sandbox's technique effects: read from the wire, one row per precision, drafter, member."""

from __future__ import annotations

import ast
import inspect
from typing import get_args

import botocore.session
import pytest

from endpoint_optimizer.sandbox import techniques
from endpoint_optimizer.sandbox.techniques import (
    DRAFTERS,
    JOB_EFFECTS,
    PRECISIONS,
    Baked,
    Quantization,
    Speculative,
    SpeculativeMethod,
    bake,
    served_speculation,
    trained_quantization,
)


def test_the_effects_read_the_wire_and_not_the_operators_table() -> None:
    nodes = list(ast.walk(ast.parse(inspect.getsource(techniques))))
    imported = {n.module or "" for n in nodes if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in nodes if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m.startswith("endpoint_optimizer")}


def test_every_precision_and_method_has_its_row() -> None:
    assert set(PRECISIONS) == set(get_args(Quantization))
    assert set(DRAFTERS) == set(get_args(SpeculativeMethod))


def test_every_job_effect_is_a_botocore_optimization_config_member() -> None:
    union = (
        botocore.session.get_session()
        .get_service_model("sagemaker")
        .shape_for("OptimizationConfig")
    )
    assert set(JOB_EFFECTS) <= set(union.members)


def test_jobs_bake_in_order_and_compilation_keeps_an_earlier_quantization() -> None:
    quantized = bake(Baked(), "ModelQuantizationConfig", {"OPTION_QUANTIZE": "awq"})
    compiled = bake(quantized, "ModelCompilationConfig", {"OPTION_TENSOR_PARALLEL_DEGREE": "4"})
    assert compiled == Baked(quantization="w4a16", compiled=True)
    smoothquant = bake(Baked(), "ModelCompilationConfig", {"OPTION_QUANTIZE": "smoothquant"})
    assert smoothquant == Baked(quantization="int8", compiled=True)
    assert bake(Baked(), "ModelSpeculativeDecodingConfig", {}) == Baked(eagle=True)
    assert bake(quantized, "ModelShardingConfig", {}) == quantized


@pytest.mark.parametrize(
    ("hyperparameters", "environment", "expected"),
    [
        ({"scheme": '"W8A8"'}, {}, "int8"),
        ({"scheme": "W4A16"}, {}, "w4a16"),
        ({"scheme": '"W8A16"'}, {}, "int8"),
        ({"recipe": '"smoothquant"'}, {}, "int8"),
        ({}, {"QUANT": "fp8"}, "fp8"),
        ({}, {}, "w4a16"),
    ],
)
def test_a_training_jobs_checkpoint_precision_comes_from_its_hyperparameters(
    hyperparameters: dict[str, str], environment: dict[str, str], expected: str
) -> None:
    assert trained_quantization(hyperparameters, environment) == expected


def test_the_environment_overrides_trained_eagle_heads() -> None:
    assert served_speculation({}, eagle=True) == Speculative("eagle", 3)
    ngram = '{"method":"ngram","num_speculative_tokens":4}'
    assert served_speculation({"OPTION_SPECULATIVE_CONFIG": ngram}, eagle=True) == Speculative(
        "ngram", 4
    )
    draft = {"OPTION_SPECULATIVE_DRAFT_MODEL": "/opt/ml/draft", "OPTION_SPECULATIVE_LENGTH": "7"}
    assert served_speculation(draft, eagle=False) == Speculative("draft", 7)
    assert served_speculation({}, eagle=False) is None

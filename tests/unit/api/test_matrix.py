"""The technique x container x instance rules (reference/sagemaker-api.md §5)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from endpoint_optimizer.api import parse_spec
from endpoint_optimizer.sagemaker.instances import (
    FAMILIES,
    OPTIMIZATION_JOB_INSTANCE_TYPES,
    Backend,
    devices,
    instance_family,
)
from endpoint_optimizer.sagemaker.matrix import (
    RULES,
    check_optimizations,
    optimization_config_keys,
)
from endpoint_optimizer.sagemaker.techniques import engine

from .admission import REPO
from .test_model import minimal_spec

CALIBRATION = {"hfDatasetId": "HuggingFaceH4/ultrachat_200k"}


def spec_with(instance: str, optimizations: dict[str, Any], **extra: Any) -> Any:
    # A model the Llama-3.1 compilation rule does not match, unless a case names one.
    extra.setdefault("model", {"s3Uri": "s3://bucket/mistral-7b/"})
    return parse_spec(
        minimal_spec(
            instanceType=instance,
            optimizations=optimizations,
            outputS3Uri="s3://bucket/out/",
            **({"evaluation": {"waiver": "unit test: quality not judged"}} | extra),
        )
    )


# (case id, instance type, optimizations, extra spec fields, rule, field)
REFUSED: list[tuple[str, str, dict[str, Any], dict[str, Any], str, str]] = [
    (
        "fp8 on A10G",
        "ml.g5.12xlarge",
        {"quantization": {"scheme": "fp8"}},
        {},
        "fp8-needs-hardware",
        "spec.optimizations.quantization.scheme",
    ),
    (
        "fp8 on A100",
        "ml.p4d.24xlarge",
        {"quantization": {"scheme": "fp8"}},
        {},
        "fp8-needs-hardware",
        "spec.optimizations.quantization.scheme",
    ),
    (
        "an NVFP4 KV cache on H100",
        "ml.p5.48xlarge",
        {},
        {"container": {"kvCacheDtype": "nvfp4"}},
        "nvfp4-kv-needs-blackwell",
        "spec.container.kvCacheDtype",
    ),
    (
        "quantization on Neuron",
        "ml.inf2.48xlarge",
        {"quantization": {"scheme": "awq"}},
        {},
        "neuron-compilation-only",
        "spec.optimizations.quantization",
    ),
    (
        "speculative decoding on Neuron",
        "ml.trn1.32xlarge",
        {"speculativeDecoding": {"method": "ngram"}},
        {},
        "neuron-compilation-only",
        "spec.optimizations.speculativeDecoding",
    ),
    (
        "smoothquant without compilation",
        "ml.g6.12xlarge",
        {"quantization": {"scheme": "smoothquant"}},
        {},
        "job-quantization-scheme",
        "spec.optimizations.quantization.scheme",
    ),
    (
        "gptq through an optimization job",
        "ml.g6.12xlarge",
        {"quantization": {"scheme": "gptq"}},
        {},
        "job-quantization-scheme",
        "spec.optimizations.quantization.scheme",
    ),
    (
        "int8 through an optimization job with compilation",
        "ml.g5.12xlarge",
        {"quantization": {"scheme": "int8"}, "compilation": {}},
        {},
        "job-quantization-scheme",
        "spec.optimizations.quantization.scheme",
    ),
    (
        "instance type the optimization job enum lacks",
        "ml.g5.96xlarge",
        {"compilation": {}},
        {},
        "optimization-job-instance",
        "spec.instanceType",
    ),
    (
        "CPU instance",
        "ml.m5.4xlarge",
        {"speculativeDecoding": {"method": "ngram"}},
        {},
        "accelerated-instance",
        "spec.instanceType",
    ),
    (
        "compilation on T4",
        "ml.g4dn.12xlarge",
        {"compilation": {}},
        {},
        "gpu-optimization-family",
        "spec.instanceType",
    ),
    (
        "GPU compilation of Llama 3.1",
        "ml.g5.12xlarge",
        {"compilation": {"tensorParallelDegree": 4}},
        {"model": {"jumpStartModelId": "meta-textgeneration-llama-3-1-8b"}},
        "compilation-llama-3.1",
        "spec.optimizations.compilation",
    ),
    (
        "llm-compressor output compiled",
        "ml.g5.12xlarge",
        {
            "quantization": {"via": "llmCompressor", "algorithm": "rtn"},
            "compilation": {},
        },
        {"model": {"s3Uri": "s3://bucket/mistral-7b/"}},
        "compressor-not-compilable",
        "spec.optimizations.compilation",
    ),
    (
        "awq W8A8",
        "ml.g5.12xlarge",
        {
            "quantization": {
                "via": "llmCompressor",
                "algorithm": "awq",
                "weightActivation": "W8A8",
                "calibrationDataset": CALIBRATION,
            }
        },
        {},
        "compressor-scheme",
        "spec.optimizations.quantization.weightActivation",
    ),
    (
        "W8A8 with a group size",
        "ml.g5.12xlarge",
        {
            "quantization": {
                "via": "llmCompressor",
                "algorithm": "gptq",
                "weightActivation": "W8A8",
                "groupSize": 128,
                "calibrationDataset": CALIBRATION,
            }
        },
        {},
        "compressor-group-size",
        "spec.optimizations.quantization.groupSize",
    ),
    (
        "llm-compressor checkpoint on T4",
        "ml.g4dn.xlarge",
        {"quantization": {"via": "llmCompressor", "algorithm": "rtn"}},
        {},
        "gpu-optimization-family",
        "spec.instanceType",
    ),
    (
        "tensor parallel over more GPUs than the instance has",
        "ml.g6.12xlarge",
        {"speculativeDecoding": {"method": "ngram"}},
        {"container": {"tensorParallelDegree": 8}},
        "tensor-parallel-devices",
        "spec.container.tensorParallelDegree",
    ),
    (
        "sharding over more GPUs than the instance has",
        "ml.g6e.2xlarge",
        {"sharding": {"tensorParallelDegree": 2}},
        {},
        "tensor-parallel-devices",
        "spec.optimizations.sharding.tensorParallelDegree",
    ),
]


@pytest.mark.parametrize(
    ("instance", "optimizations", "extra", "rule", "field"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_refusal_names_rule_field_and_alternatives(
    instance: str, optimizations: dict[str, Any], extra: dict[str, Any], rule: str, field: str
) -> None:
    violations = check_optimizations(spec_with(instance, optimizations, **extra))
    assert [(v.rule, v.field) for v in violations] == [(rule, field)]
    assert violations[0].allowed, "a refusal must say what would be accepted"
    assert field in violations[0].text() and rule in violations[0].text()


@pytest.mark.parametrize(
    ("instance", "optimizations"),
    [
        ("ml.g6e.2xlarge", {"quantization": {"scheme": "fp8"}}),
        (
            "ml.p5.48xlarge",
            {"quantization": {"scheme": "fp8"}, "speculativeDecoding": {"method": "ngram"}},
        ),
        ("ml.g5.12xlarge", {"quantization": {"scheme": "smoothquant"}, "compilation": {}}),
        ("ml.g5.12xlarge", {"quantization": {"scheme": "awq"}}),
        ("ml.inf2.48xlarge", {"compilation": {"tensorParallelDegree": 24}}),
        ("ml.g6.48xlarge", {"sharding": {"tensorParallelDegree": 8}}),
        ("ml.g4dn.xlarge", {"speculativeDecoding": {"method": "ngram"}}),
        ("ml.g7e.12xlarge", {"speculativeDecoding": {"method": "eagle"}}),
        ("ml.g7.8xlarge", {"quantization": {"scheme": "fp8"}}),
        ("ml.m5.large", {}),
    ],
)
def test_supported_combinations_pass(instance: str, optimizations: dict[str, Any]) -> None:
    assert check_optimizations(spec_with(instance, optimizations)) == []


@pytest.mark.parametrize(
    ("instance", "kv_cache_dtype"),
    [("ml.p6-b200.48xlarge", "nvfp4"), ("ml.g7e.2xlarge", "nvfp4"), ("ml.g5.12xlarge", "fp8")],
)
def test_a_quantized_kv_cache_passes_where_the_gpu_has_the_format(
    instance: str, kv_cache_dtype: str
) -> None:
    spec = spec_with(instance, {}, container={"kvCacheDtype": kv_cache_dtype})
    assert check_optimizations(spec) == []


def test_backend_and_job_configs_follow_the_techniques() -> None:
    compiled = spec_with("ml.g5.12xlarge", {"quantization": {"scheme": "awq"}, "compilation": {}})
    assert engine(compiled) is Backend.TRTLLM
    assert optimization_config_keys(compiled) == [
        "ModelQuantizationConfig",
        "ModelCompilationConfig",
    ]
    ngram = spec_with("ml.g6.12xlarge", {"speculativeDecoding": {"method": "ngram"}})
    assert engine(ngram) is Backend.VLLM and optimization_config_keys(ngram) == []
    neuron = spec_with("ml.inf2.24xlarge", {"compilation": {}})
    assert engine(neuron) is Backend.NEURON
    eagle = spec_with("ml.p5.48xlarge", {"speculativeDecoding": {"method": "eagle"}})
    assert optimization_config_keys(eagle) == ["ModelSpeculativeDecodingConfig"]


def test_instance_tables_are_consistent() -> None:
    assert "ml.g6e.2xlarge" in OPTIMIZATION_JOB_INSTANCE_TYPES
    assert "ml.g5.96xlarge" not in OPTIMIZATION_JOB_INSTANCE_TYPES
    assert devices("ml.g5.48xlarge") == 8 and devices("ml.unknown.xlarge") is None


def test_every_example_passes_the_matrix() -> None:
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc and doc["kind"] == "OptimizedEndpoint":
                assert check_optimizations(parse_spec(doc["spec"])) == [], path.name


def test_every_rule_has_a_refusal_case() -> None:
    assert {case[4] for case in REFUSED} == set(RULES)


def test_every_job_instance_family_is_known() -> None:
    families = {instance_family(t) for t in OPTIMIZATION_JOB_INSTANCE_TYPES}
    assert families <= set(FAMILIES)

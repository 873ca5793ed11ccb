"""The techniques table: one row per technique, agreeing with the api model and botocore."""

from __future__ import annotations

from typing import Any

import botocore.session
import pytest
from botocore.validate import validate_parameters

from endpoint_optimizer.api import Optimizations, parse_spec
from endpoint_optimizer.pipeline import plan
from endpoint_optimizer.sagemaker import matrix
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker.naming import Owner
from endpoint_optimizer.sagemaker.techniques import (
    CONFIG_LABELS,
    TECHNIQUES,
    TRAINING_LABELS,
    job_configs,
    requested,
)
from endpoint_optimizer.sagemaker.techniques.settings import SETTINGS
from tests.unit.api.test_model import minimal_spec

_SAGEMAKER = botocore.session.get_session().get_service_model("sagemaker")


def _spec(**optimizations: Any) -> Any:
    return parse_spec(
        minimal_spec(
            instanceType="ml.g6e.12xlarge",
            model={"s3Uri": "s3://bucket/mistral-7b/"},
            outputS3Uri="s3://bucket/out/",
            optimizations=optimizations,
            evaluation={"waiver": "unit test: quality not judged"},
        )
    )


def test_the_table_runs_in_the_seeds_order_with_one_row_per_api_field() -> None:
    fields = [info.alias or name for name, info in Optimizations.model_fields.items()]
    assert [t.label for t in TECHNIQUES] == ["containerSettings", *fields]
    assert fields == ["quantization", "speculativeDecoding", "compilation", "sharding"]


def test_settings_label_is_the_one_status_reports_for_a_settings_only_candidate() -> None:
    # pipeline/decide.py writes this label into status.candidateTechniques.
    assert SETTINGS.label == "containerSettings"


def test_every_member_a_technique_writes_is_a_botocore_optimization_config_member() -> None:
    union = _SAGEMAKER.shape_for("OptimizationConfig")
    members = {m for t in TECHNIQUES for m in t.config_members}
    assert members <= set(union.members)
    assert CONFIG_LABELS == {
        "ModelQuantizationConfig": "quantization",
        "ModelSpeculativeDecodingConfig": "speculativeDecoding",
        "ModelCompilationConfig": "compilation",
        "ModelShardingConfig": "sharding",
    }
    assert TRAINING_LABELS == ("quantization",)


def test_rule_ids_are_unique_across_techniques_and_the_matrix() -> None:
    ids = [rule for t in TECHNIQUES for rule in t.rules]
    assert len(ids) == len(set(ids))
    assert set(ids) <= set(matrix.RULES)


@pytest.mark.parametrize(
    ("optimizations", "members"),
    [
        ({"quantization": {"scheme": "fp8"}}, ["ModelQuantizationConfig"]),
        (
            {"quantization": {"scheme": "awq"}, "speculativeDecoding": {"method": "eagle"}},
            ["ModelQuantizationConfig", "ModelSpeculativeDecodingConfig"],
        ),
        (
            {"speculativeDecoding": {"method": "eagle"}, "sharding": {"tensorParallelDegree": 4}},
            ["ModelSpeculativeDecodingConfig", "ModelShardingConfig"],
        ),
        ({"speculativeDecoding": {"method": "ngram"}}, []),
        ({"quantization": {"via": "llmCompressor", "algorithm": "rtn"}}, []),
    ],
)
def test_job_elements_come_in_table_order_and_botocore_accepts_them(
    optimizations: dict[str, Any], members: list[str]
) -> None:
    spec = _spec(**optimizations)
    assert [c.member for c in job_configs(spec)] == members
    job = plan.optimization_job(spec, plan.Names.of(Owner("ml", "chat", "uid"), 1))
    assert (job is None) == (members == [])
    if job is not None:
        request = rq.create_optimization_job(job, "ml/chat/uid")
        shape = _SAGEMAKER.operation_model("CreateOptimizationJob").input_shape
        validate_parameters(request, shape)


def test_eagle_names_its_training_data_in_the_speculative_element() -> None:
    spec = _spec(
        speculativeDecoding={
            "method": "eagle",
            "eagleTrainingData": {"s3Uri": "s3://bucket/chats/", "s3DataType": "ManifestFile"},
        }
    )
    assert [c.element() for c in job_configs(spec)] == [
        {
            "ModelSpeculativeDecodingConfig": {
                "Technique": "EAGLE",
                "TrainingDataSource": {"S3Uri": "s3://bucket/chats/", "S3DataType": "ManifestFile"},
            }
        }
    ]


def test_requested_includes_settings_only_when_a_setting_is_set() -> None:
    assert requested(_spec()) == []
    assert [t.label for t in requested(_spec(speculativeDecoding={"method": "ngram"}))] == [
        "speculativeDecoding"
    ]
    with_settings = parse_spec(minimal_spec(container={"maxModelLen": 4096}))
    assert [t.label for t in requested(with_settings)] == ["containerSettings"]

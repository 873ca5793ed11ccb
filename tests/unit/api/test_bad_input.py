"""A corpus of invalid resources: each is refused with a message that names the field.

Every case goes through both doors: the CRD (structural defaulting, OpenAPI schema,
kubectl's strict field validation, CEL) and the pydantic model (`parse_spec`). A case
marked crd=False is one the CRD cannot say (map keys); the operator's
model still refuses it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from endpoint_optimizer.api import SpecError, parse_spec

from .admission import admit

Mutation = Callable[[dict[str, Any]], None]


def base_resource() -> dict[str, Any]:
    return {
        "apiVersion": "optimizer.dev/v1alpha1",
        "kind": "OptimizedEndpoint",
        "metadata": {"name": "chat", "namespace": "ml"},
        "spec": {
            "endpointName": "llama-8b-chat",
            "region": "us-east-1",
            "executionRoleArn": "arn:aws:iam::123456789012:role/sagemaker-exec",
            "model": {"s3Uri": "s3://acme-models/llama-3.1-8b/"},
            "instanceType": "ml.g6e.2xlarge",
            "optimizations": {"quantization": {"scheme": "fp8"}},
            "outputS3Uri": "s3://acme-models/optimized/",
            "benchmark": {"concurrency": [1, 16]},
            "evaluation": {"dataset": {"configMapRef": {"name": "evals", "key": "items.jsonl"}}},
            "rollout": {"strategy": "canary", "steps": [{"weight": 10}, {"weight": 50}]},
        },
    }


def put(path: str, value: Any) -> Mutation:
    """Set spec.<path> (dots, and [i] for list items) to value, creating objects."""

    def mutate(resource: dict[str, Any]) -> None:
        node: Any = resource["spec"]
        parts = [int(p) if p.isdigit() else p for p in re.split(r"\.|\[|\]\.?", path) if p]
        for part in parts[:-1]:
            if isinstance(part, str) and part not in node:
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value

    return mutate


def drop(path: str) -> Mutation:
    def mutate(resource: dict[str, Any]) -> None:
        node: Any = resource["spec"]
        *parents, leaf = path.split(".")
        for part in parents:
            node = node[part]
        del node[leaf]

    return mutate


def both(*mutations: Mutation) -> Mutation:
    def mutate(resource: dict[str, Any]) -> None:
        for mutation in mutations:
            mutation(resource)

    return mutate


@dataclass(frozen=True)
class Bad:
    name: str
    mutate: Mutation
    field: str  # the camelCase path the refusal must name (under spec.)
    crd: bool = True  # refused at kubectl apply (schema or CEL)
    model: bool = True  # refused by parse_spec


LLM_COMPRESSOR = {"via": "llmCompressor", "algorithm": "gptq"}
CALIBRATION = {"hfDatasetId": "HuggingFaceH4/ultrachat_200k"}

CORPUS = [
    Bad("endpoint name with underscore", put("endpointName", "llama_8b"), "endpointName"),
    Bad("endpoint name of 64 characters", put("endpointName", "a" * 64), "endpointName"),
    Bad("endpoint name ending in a dash", put("endpointName", "llama-"), "endpointName"),
    Bad("missing endpoint name", drop("endpointName"), "endpointName"),
    Bad("upper-case region", put("region", "US-EAST-1"), "region"),
    Bad(
        "role ARN with a short account",
        put("executionRoleArn", "arn:aws:iam::1234:role/x"),
        "executionRoleArn",
    ),
    Bad(
        "user ARN instead of role",
        put("executionRoleArn", "arn:aws:iam::123456789012:user/bob"),
        "executionRoleArn",
    ),
    Bad("missing role", drop("executionRoleArn"), "executionRoleArn"),
    Bad("model with S3 and JumpStart", put("model.jumpStartModelId", "meta-llama-3-8b"), "model"),
    Bad("model with no source", put("model", {"acceptEula": True}), "model"),
    Bad("model with S3 and the Hub", put("model.hfModelId", "meta-llama/Llama-3.1-8B"), "model"),
    Bad("Hub revision without a Hub model", put("model.hfRevision", "main"), "model"),
    Bad(
        "token Secret with an invalid name",
        put("model.tokenSecretRef", {"name": "HF_Token"}),
        "model.tokenSecretRef.name",
    ),
    Bad(
        "SageMaker-provided draft with a source",
        both(
            put("model", {"jumpStartModelId": "meta-textgeneration-llama-3-1-8b-instruct"}),
            put(
                "optimizations",
                {
                    "speculativeDecoding": {
                        "method": "draftModel",
                        "draftModel": {"modelProvider": "sageMaker", "s3Uri": "s3://acme/d/"},
                    }
                },
            ),
        ),
        "optimizations.speculativeDecoding.draftModel",
    ),
    Bad(
        "SageMaker-provided draft for an S3 model",
        put(
            "optimizations",
            {
                "speculativeDecoding": {
                    "method": "draftModel",
                    "draftModel": {"modelProvider": "sageMaker"},
                }
            },
        ),
        "optimizations.speculativeDecoding.draftModel.modelProvider",
    ),
    Bad("VPC subnets without security groups", put("network.subnets", ["subnet-1"]), "network"),
    Bad(
        "more than 5 security groups",
        both(
            put("network.subnets", ["s-1"]),
            put("network.securityGroupIds", [f"sg-{i}" for i in range(6)]),
        ),
        "network.securityGroupIds",
    ),
    Bad(
        "KMS key with a space",
        put("network.volumeKmsKeyId", "alias/my key"),
        "network.volumeKmsKeyId",
    ),
    Bad("model URI over https", put("model.s3Uri", "https://bucket/x/"), "model.s3Uri"),
    Bad(
        "environment name starting with a digit",
        put("model.environment", {"1BAD": "x"}),
        "model.environment",
        crd=False,
    ),
    Bad("instance type without ml. prefix", put("instanceType", "g5.xlarge"), "instanceType"),
    Bad("zero instances", put("instanceCount", 0), "instanceCount"),
    Bad("instance count as a string", put("instanceCount", "two"), "instanceCount"),
    Bad(
        "GPU memory share over 1",
        put("container.gpuMemoryUtilization", 1.5),
        "container.gpuMemoryUtilization",
    ),
    Bad("tiny max model length", put("container.maxModelLen", 64), "container.maxModelLen"),
    Bad(
        "health check over an hour",
        put("timeouts.containerStartupHealthCheckSeconds", 7200),
        "timeouts.containerStartupHealthCheckSeconds",
    ),
    Bad(
        "unknown quantization scheme",
        put("optimizations.quantization.scheme", "int4"),
        "optimizations.quantization.scheme",
    ),
    Bad(
        "optimization job without scheme",
        put("optimizations.quantization", {"via": "optimizationJob"}),
        "optimizations.quantization",
    ),
    Bad(
        "llm-compressor with a job scheme",
        put(
            "optimizations.quantization",
            {**LLM_COMPRESSOR, "scheme": "fp8", "calibrationDataset": CALIBRATION},
        ),
        "optimizations.quantization",
    ),
    Bad(
        "gptq without calibration data",
        put("optimizations.quantization", LLM_COMPRESSOR),
        "optimizations.quantization",
    ),
    Bad(
        "unknown weight x activation",
        put(
            "optimizations.quantization",
            {**LLM_COMPRESSOR, "weightActivation": "W4A8", "calibrationDataset": CALIBRATION},
        ),
        "optimizations.quantization.weightActivation",
    ),
    Bad(
        "group size on an optimization job",
        put("optimizations.quantization.groupSize", 128),
        "optimizations.quantization",
    ),
    Bad(
        "calibration dataset with two sources",
        put(
            "optimizations.quantization",
            {
                **LLM_COMPRESSOR,
                "calibrationDataset": {**CALIBRATION, "s3Uri": "s3://acme/cal.jsonl"},
            },
        ),
        "optimizations.quantization.calibrationDataset",
    ),
    Bad(
        "group size of 8",
        put(
            "optimizations.quantization",
            {**LLM_COMPRESSOR, "groupSize": 8, "calibrationDataset": CALIBRATION},
        ),
        "optimizations.quantization.groupSize",
    ),
    Bad(
        "unknown speculative method",
        put("optimizations.speculativeDecoding", {"method": "medusa"}),
        "optimizations.speculativeDecoding.method",
    ),
    Bad(
        "draft-model method without a draft",
        put("optimizations.speculativeDecoding", {"method": "draftModel"}),
        "optimizations.speculativeDecoding",
    ),
    Bad(
        "draft with two sources",
        put(
            "optimizations.speculativeDecoding",
            {
                "method": "draftModel",
                "draftModel": {"hfModelId": "meta/llama-1b", "s3Uri": "s3://acme/draft/"},
            },
        ),
        "optimizations.speculativeDecoding.draftModel",
    ),
    Bad(
        "draft source with ngram",
        put(
            "optimizations.speculativeDecoding",
            {"method": "ngram", "draftModel": {"hfModelId": "meta/llama-1b"}},
        ),
        "optimizations.speculativeDecoding",
    ),
    Bad(
        "EAGLE data with ngram",
        put(
            "optimizations.speculativeDecoding",
            {"method": "ngram", "eagleTrainingData": {"s3Uri": "s3://acme/sharegpt/"}},
        ),
        "optimizations.speculativeDecoding",
    ),
    Bad(
        "prompt lookup min above max",
        put(
            "optimizations.speculativeDecoding",
            {"method": "ngram", "promptLookupMin": 5, "promptLookupMax": 2},
        ),
        "optimizations.speculativeDecoding",
    ),
    Bad(
        "prompt lookup with a draft model",
        put(
            "optimizations.speculativeDecoding",
            {
                "method": "draftModel",
                "draftModel": {"hfModelId": "meta/llama-1b"},
                "promptLookupMax": 3,
            },
        ),
        "optimizations.speculativeDecoding",
    ),
    Bad(
        "zero speculative tokens",
        put("optimizations.speculativeDecoding", {"method": "ngram", "numSpeculativeTokens": 0}),
        "optimizations.speculativeDecoding.numSpeculativeTokens",
    ),
    Bad(
        "acceptance rate above 1",
        put("optimizations.speculativeDecoding", {"method": "ngram", "minAcceptanceRate": 1.5}),
        "optimizations.speculativeDecoding.minAcceptanceRate",
    ),
    Bad(
        "compilation with speculative decoding",
        both(
            put("optimizations.compilation", {}),
            put("optimizations.speculativeDecoding", {"method": "ngram"}),
        ),
        "optimizations",
    ),
    Bad(
        "sharding with quantization",
        put("optimizations.sharding", {"tensorParallelDegree": 1}),
        "optimizations",
    ),
    Bad(
        "sharding without tensor parallel degree",
        put("optimizations", {"sharding": {}}),
        "optimizations.sharding.tensorParallelDegree",
    ),
    Bad("quantization without an output prefix", drop("outputS3Uri"), "outputS3Uri"),
    Bad(
        "output prefix in a bad bucket", put("outputS3Uri", "s3://Acme_Models/out/"), "outputS3Uri"
    ),
    Bad("objective given as a string", put("objective", "latency"), "objective"),
    Bad("unknown objective", put("objective.metric", "cost"), "objective.metric"),
    Bad(
        "negative minimum improvement",
        put("objective.minImprovement", -0.1),
        "objective.minImprovement",
    ),
    Bad(
        "objective at an unmeasured concurrency",
        put("objective.concurrency", 32),
        "objective.concurrency",
    ),
    Bad(
        "duplicate concurrency levels",
        put("benchmark.concurrency", [8, 8]),
        "benchmark.concurrency",
    ),
    Bad("no concurrency levels", put("benchmark.concurrency", []), "benchmark.concurrency"),
    Bad(
        "a concurrency level no operator runs",
        put("benchmark.concurrency", [1, 1025]),
        "benchmark.concurrency",
    ),
    Bad(
        "nine concurrency levels",
        put("benchmark.concurrency", list(range(1, 10))),
        "benchmark.concurrency",
    ),
    Bad(
        "a negative spread of prompt lengths",
        put("benchmark.inputTokensSd", -5),
        "benchmark.inputTokensSd",
    ),
    Bad(
        "request timeout in words",
        put("benchmark.requestTimeout", "2 minutes"),
        "benchmark.requestTimeout",
    ),
    Bad(
        "evaluation without an eval set or a waiver",
        put("evaluation", {"metric": "rouge_l"}),
        "evaluation.dataset",
    ),
    Bad(
        "a quantized candidate without evaluation",
        lambda resource: resource["spec"].pop("evaluation"),
        "evaluation",
    ),
    Bad(
        "a new serving image without evaluation",
        both(
            lambda resource: resource["spec"].pop("evaluation"),
            put("optimizations", {}),
            put("model.image", "123456789012.dkr.ecr.us-east-1.amazonaws.com/djl:lmi"),
        ),
        "evaluation",
    ),
    Bad(
        "a waiver next to an eval set",
        put("evaluation.waiver", "measured by hand"),
        "evaluation.waiver",
    ),
    Bad("an empty waiver", put("evaluation", {"waiver": ""}), "evaluation.waiver"),
    Bad(
        "a reasoning suite with fewer max than min steps",
        put("evaluation.generated", {"multiStepReasoning": {"minSteps": 5, "maxSteps": 3}}),
        "evaluation.generated.multiStepReasoning.minSteps",
    ),
    Bad(
        "ConfigMap name with capitals",
        put("evaluation.dataset.configMapRef.name", "Support_Evals"),
        "evaluation.dataset.configMapRef.name",
    ),
    Bad("drop limit above 1", put("evaluation.maxAbsoluteDrop", 2), "evaluation.maxAbsoluteDrop"),
    Bad("confidence of 0.3", put("evaluation.confidence", 0.3), "evaluation.confidence"),
    Bad("unknown eval metric", put("evaluation.metric", "bleu"), "evaluation.metric"),
    Bad(
        "spot check without approval",
        put("evaluation.spotCheck", {"samples": 5}),
        "evaluation.spotCheck",
    ),
    Bad("unknown rollout strategy", put("rollout.strategy", "linear"), "rollout.strategy"),
    Bad(
        "decreasing step weights",
        put("rollout.steps", [{"weight": 50}, {"weight": 10}]),
        "rollout.steps[1].weight",
    ),
    Bad(
        "equal step weights",
        put("rollout.steps", [{"weight": 10}, {"weight": 20}, {"weight": 20}]),
        "rollout.steps[2].weight",
    ),
    Bad("zero weight", put("rollout.steps[0].weight", 0), "rollout.steps[0].weight"),
    Bad("weight above 100", put("rollout.steps[1].weight", 150), "rollout.steps[1].weight"),
    Bad("shadow with weights", put("rollout.strategy", "shadow"), "rollout.steps[0].weight"),
    Bad(
        "canary step without weight",
        put("rollout.steps", [{"weight": 10}, {"pause": "5m"}]),
        "rollout.steps[1].weight",
    ),
    Bad(
        "eleven steps", put("rollout.steps", [{"weight": w} for w in range(1, 12)]), "rollout.steps"
    ),
    Bad("pause in words", put("rollout.steps[0].pause", "5 minutes"), "rollout.steps[0].pause"),
    Bad(
        "unknown no-data policy",
        put("rollout.analysis.onNoData", "ignore"),
        "rollout.analysis.onNoData",
    ),
    Bad(
        "zero analysis interval",
        put("rollout.analysis.interval", "0s"),
        "rollout.analysis.interval",
    ),
    Bad("unknown approval", put("rollout.approval", "always"), "rollout.approval"),
    Bad("Orphan deletion policy", put("deletionPolicy", "Orphan"), "deletionPolicy"),
    Bad("adoption without its proof", put("adoptExisting", True), "adoption"),
    Bad(
        "adoption proof without adoptExisting",
        put("adoption", {"byTag": True}),
        "adoption",
    ),
    Bad(
        "adoption with two proofs",
        both(
            put("adoptExisting", True),
            put(
                "adoption",
                {
                    "byTag": True,
                    "endpointArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint/x",
                },
            ),
        ),
        "adoption",
    ),
    Bad(
        "adoption ARN of another resource type",
        both(
            put("adoptExisting", True),
            put("adoption", {"endpointArn": "arn:aws:sagemaker:us-east-1:123456789012:model/x"}),
        ),
        "adoption.endpointArn",
    ),
    Bad(
        "inference component on an endpoint not adopted",
        put("inferenceComponent", {"name": "chat-ic"}),
        "inferenceComponent",
    ),
    Bad(
        "inference component with a shadow rollout",
        both(
            put("adoptExisting", True),
            put("adoption", {"byTag": True}),
            put("inferenceComponent", {"name": "chat-ic"}),
            put("rollout", {"strategy": "shadow", "steps": [{"pause": "1m"}]}),
        ),
        "inferenceComponent",
    ),
    Bad(
        "inference component name SageMaker refuses",
        both(
            put("adoptExisting", True),
            put("adoption", {"byTag": True}),
            put("inferenceComponent", {"name": "chat_ic"}),
        ),
        "inferenceComponent.name",
    ),
    Bad(
        "search beside optimizations",
        put("search", {"quantization": [{"name": "fp8", "scheme": "fp8"}]}),
        "search",
    ),
    Bad(
        "search without an alternative",
        both(drop("optimizations"), put("search", {"budget": {"candidates": 2}})),
        "search",
    ),
    Bad(
        "search alternatives of one name in a rung",
        both(
            drop("optimizations"),
            put(
                "search",
                {
                    "quantization": [
                        {"name": "q", "scheme": "fp8"},
                        {"name": "q", "scheme": "awq"},
                    ]
                },
            ),
        ),
        "search.quantization[1]",
    ),
    Bad(
        "search alternative name repeated across rungs",
        both(
            drop("optimizations"),
            put(
                "search",
                {
                    "quantization": [{"name": "fast", "scheme": "fp8"}],
                    "speculativeDecoding": [{"name": "fast", "method": "ngram"}],
                },
            ),
        ),
        "search.speculativeDecoding[0].name",
        crd=False,
    ),
    Bad(
        "search alternative name that is no DNS label",
        both(
            drop("optimizations"),
            put("search", {"quantization": [{"name": "FP8_fast", "scheme": "fp8"}]}),
        ),
        "search.quantization[0].name",
    ),
    Bad(
        "search with quantization and no outputS3Uri",
        both(
            drop("optimizations"),
            drop("outputS3Uri"),
            put("search", {"quantization": [{"name": "fp8", "scheme": "fp8"}]}),
        ),
        "outputS3Uri",
    ),
    Bad(
        "search that changes numerics without an eval",
        both(
            drop("optimizations"),
            drop("evaluation"),
            put("search", {"speculativeDecoding": [{"name": "ngram", "method": "ngram"}]}),
        ),
        "evaluation",
    ),
    Bad(
        "search beside container settings",
        both(
            drop("optimizations"),
            put("container", {"maxRollingBatchSize": 64}),
            put("search", {"quantization": [{"name": "fp8", "scheme": "fp8"}]}),
        ),
        "search",
    ),
    Bad(
        "search budget of no candidates",
        both(
            drop("optimizations"),
            put(
                "search",
                {"quantization": [{"name": "fp8", "scheme": "fp8"}], "budget": {"candidates": 0}},
            ),
        ),
        "search.budget.candidates",
    ),
    Bad(
        "search instance types without the memory check's model shape",
        both(
            drop("optimizations"),
            put(
                "search",
                {
                    "quantization": [{"name": "awq", "scheme": "awq"}],
                    "instanceTypes": [{"name": "small", "instanceType": "ml.g6e.xlarge"}],
                },
            ),
        ),
        "search.memoryFit",
    ),
    Bad(
        "search instance type that is no instance type",
        both(
            drop("optimizations"),
            put(
                "search",
                {
                    "quantization": [{"name": "awq", "scheme": "awq"}],
                    "instanceTypes": [{"name": "small", "instanceType": "g6e.xlarge"}],
                    "memoryFit": {
                        "parametersBillion": 8,
                        "layers": 32,
                        "kvHeads": 8,
                        "headDim": 128,
                    },
                },
            ),
        ),
        "search.instanceTypes[0].instanceType",
    ),
    Bad(
        "a cost objective without a latency limit",
        put("objective", {"metric": "costPerMillionTokens"}),
        "benchmark.slo",
    ),
    Bad(
        "an objective metric that does not exist",
        put("objective", {"metric": "p95"}),
        "objective.metric",
    ),
    Bad("misspelt top-level field", put("endpointname", "x"), "endpointname"),
    Bad("misspelt nested field", put("rollout.steps[0].paws", "1m"), "rollout.steps[0].paws"),
]


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 30
    assert len({case.name for case in CORPUS}) == len(CORPUS)


def _names_field(problem: str, field: str) -> bool:
    """The problem's path lies on the field's branch and its text names the field."""
    path, _, text = problem.partition(": ")
    full = f"spec.{field}"
    same_branch = full.startswith(path) or path.startswith(full)
    leaf = re.sub(r"\[\d+\]", "", field).split(".")[-1]
    return same_branch and (leaf in path or leaf in text)


@pytest.mark.parametrize("case", CORPUS, ids=[case.name for case in CORPUS])
def test_bad_input_is_refused_naming_the_field(case: Bad) -> None:
    resource = base_resource()
    assert admit(resource)[1] == [] and parse_spec(resource["spec"])  # the base is valid
    case.mutate(resource)

    _, problems = admit(copy.deepcopy(resource))
    if case.crd:
        assert problems, f"the CRD admitted {case.name}"
        assert any(_names_field(p, case.field) for p in problems), problems
    else:
        assert problems == [], "the CRD now refuses this case: set crd=True"

    if case.model:
        with pytest.raises(SpecError) as caught:
            parse_spec(resource["spec"])
        paths = [p.path for p in caught.value.problems]
        assert any(
            _names_field(f"{p.path}: {p.message}", case.field) for p in caught.value.problems
        ), paths
        assert all(p.message for p in caught.value.problems)


@pytest.mark.parametrize(
    ("field", "value"), [("endpointName", "other-endpoint"), ("region", "eu-west-1")]
)
def test_update_cannot_move_the_endpoint(field: str, value: str) -> None:
    old = base_resource()
    new = copy.deepcopy(old)
    new["spec"][field] = value
    assert admit(new)[1] == []  # a new resource may name any endpoint
    problems = admit(new, old=old)[1]
    assert len(problems) == 1 and problems[0].startswith(f"spec.{field}: {field} is immutable")
    same = copy.deepcopy(old)
    same["spec"]["instanceCount"] = 3
    assert admit(same, old=old)[1] == []

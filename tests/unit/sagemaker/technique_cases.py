"""Every request the operator builds for the examples and for every technique combination.

`build(case)` runs one spec through what the operator does with techniques: the matrix,
the plan (baseline, optimization or training job, candidate), the request builders, and
the sandbox's model of what those requests serve. `test_technique_golden.py` compares the
result with `golden/techniques.jsonl`, written by `python -m tests.unit.sagemaker.technique_cases`
from the tree before the techniques table existed, so the table provably changed nothing.
Only entry points that predate the table are called here (plan, matrix, requests,
training, the sandbox's ControlPlane), so the same file runs against either tree.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from endpoint_optimizer.api import SpecError, parse_spec
from endpoint_optimizer.pipeline import plan
from endpoint_optimizer.pipeline.model import JobView
from endpoint_optimizer.sagemaker import matrix, training
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker.naming import Owner
from endpoint_optimizer.sandbox.config import SandboxConfig
from endpoint_optimizer.sandbox.control import ControlPlane
from endpoint_optimizer.sandbox.serving import eval_outcome

REPO = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).parent / "golden" / "techniques.jsonl"
OWNER = Owner("ml", "chat", "uid-golden")
NAMES = plan.Names.of(OWNER, 3)
ROLE = "arn:aws:iam::123456789012:role/sagemaker-exec"

CALIBRATION_HF = {"hfDatasetId": "HuggingFaceH4/ultrachat_200k", "split": "train_sft"}
CALIBRATION_S3 = {"s3Uri": "s3://bucket/calibration.jsonl", "textField": "prompt"}

QUANTIZATION: list[dict[str, Any] | None] = [
    None,
    {"scheme": "fp8"},
    {"scheme": "int8"},
    {"scheme": "smoothquant"},
    {"scheme": "awq"},
    {"scheme": "gptq"},
    {"via": "optimizationJob", "scheme": "fp8", "image": "123.dkr.ecr.us-east-1.amazonaws.com/q:1"},
    {"via": "llmCompressor", "algorithm": "awq", "calibrationDataset": CALIBRATION_HF},
    {
        "via": "llmCompressor",
        "algorithm": "gptq",
        "weightActivation": "W8A8",
        "calibrationDataset": CALIBRATION_S3,
        "numCalibrationSamples": 64,
        "maxSequenceLength": 512,
    },
    {
        "via": "llmCompressor",
        "algorithm": "gptq",
        "weightActivation": "W4A16",
        "groupSize": 64,
        "symmetric": False,
        "calibrationDataset": CALIBRATION_S3,
        "ignore": ["lm_head", "re:.*gate"],
        "targets": ["Linear"],
    },
    {
        "via": "llmCompressor",
        "algorithm": "smoothquant",
        "smoothingStrength": 0.5,
        "calibrationDataset": CALIBRATION_HF,
        "trainingInstanceType": "ml.g6e.12xlarge",
    },
    {"via": "llmCompressor", "algorithm": "rtn", "weightActivation": "W8A16"},
    {"via": "llmCompressor", "algorithm": "rtn", "weightActivation": "W8A8", "groupSize": 64},
    {
        "via": "llmCompressor",
        "algorithm": "awq",
        "weightActivation": "W8A8",
        "calibrationDataset": CALIBRATION_HF,
        "trainingImage": "123.dkr.ecr.us-east-1.amazonaws.com/llmc:1",
    },
]
SPECULATIVE: list[dict[str, Any] | None] = [
    None,
    {"method": "ngram"},
    {"method": "ngram", "numSpeculativeTokens": 3, "promptLookupMin": 1, "promptLookupMax": 4},
    {"method": "draftModel", "draftModel": {"s3Uri": "s3://bucket/draft", "acceptEula": True}},
    {
        "method": "draftModel",
        "draftModel": {"hfModelId": "org/draft-1b"},
        "numSpeculativeTokens": 7,
    },
    {"method": "draftModel", "draftModel": {"jumpStartModelId": "meta-llama-3-2-1b"}},
    {"method": "eagle"},
    {
        "method": "eagle",
        "eagleTrainingData": {"s3Uri": "s3://bucket/chats.manifest", "s3DataType": "ManifestFile"},
    },
]
COMPILATION: list[dict[str, Any] | None] = [
    None,
    {},
    {"tensorParallelDegree": 4, "image": "123.dkr.ecr.us-east-1.amazonaws.com/trt:1"},
    {"tensorParallelDegree": 24},
]
SHARDING: list[dict[str, Any] | None] = [
    None,
    {"tensorParallelDegree": 4},
    {"tensorParallelDegree": 8, "image": "123.dkr.ecr.us-east-1.amazonaws.com/shard:1"},
]
INSTANCES = [
    "ml.g5.12xlarge",
    "ml.g6e.12xlarge",
    "ml.p5.48xlarge",
    "ml.inf2.24xlarge",
    "ml.g4dn.xlarge",
    "ml.p5.4xlarge",  # an endpoint instance the optimization job enum lacks
    "ml.m5.large",
]
CONTAINER = {
    "maxModelLen": 4096,
    "maxRollingBatchSize": 64,
    "gpuMemoryUtilization": 0.9,
    "tensorParallelDegree": 4,
    "dtype": "bf16",
}


def _base(instance: str, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "endpointName": "chat",
        "region": "us-east-1",
        "executionRoleArn": ROLE,
        "model": {"s3Uri": "s3://bucket/mistral-7b/", "environment": {"HF_TASK": "chat"}},
        "instanceType": instance,
        "outputS3Uri": "s3://bucket/out/",
    }
    spec.update(extra)
    return spec


def _waived(spec: dict[str, Any]) -> dict[str, Any]:
    # Numerical changes need an eval or a waiver; the requests built do not depend on it,
    # so the case ids (hashes of the spec) stay those of the goldens.
    return spec | {"evaluation": {"waiver": "technique cases: requests only"}}


def combinations() -> Iterator[tuple[str, dict[str, Any]]]:
    """(case id, spec) for each technique combination the api model accepts."""
    for q, s, c, h in itertools.product(QUANTIZATION, SPECULATIVE, COMPILATION, SHARDING):
        optimizations = {
            key: value
            for key, value in (
                ("quantization", q),
                ("speculativeDecoding", s),
                ("compilation", c),
                ("sharding", h),
            )
            if value is not None
        }
        for instance in INSTANCES:
            for container in (None, CONTAINER):
                extra: dict[str, Any] = {"optimizations": optimizations}
                if container is not None:
                    extra["container"] = container
                spec = _base(instance, **extra)
                try:
                    parse_spec(_waived(spec))
                except SpecError:
                    continue
                key = json.dumps(spec, sort_keys=True, separators=(",", ":"))
                yield hashlib.sha256(key.encode()).hexdigest()[:16], _waived(spec)
    # The Llama 3.1 compilation rule, a JumpStart model, settings alone and nothing at all.
    llama = {"s3Uri": "s3://bucket/llama-3.1-8b/"}
    yield (
        "llama31-compiled",
        _waived(_base("ml.g6e.12xlarge", model=llama, optimizations={"compilation": {}})),
    )
    yield (
        "jumpstart-fp8",
        _waived(
            _base(
                "ml.g6e.12xlarge",
                model={"jumpStartModelId": "meta-textgeneration-llama-3-8b", "acceptEula": True},
                optimizations={"quantization": {"scheme": "fp8"}},
            )
        ),
    )
    yield "settings-only", _waived(_base("ml.g6e.12xlarge", container=CONTAINER))
    yield "nothing", _base("ml.g6e.12xlarge")


def examples() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for index, doc in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if doc and doc.get("kind") == "OptimizedEndpoint":
                yield f"example:{path.name}:{index}", doc["spec"]


def cases() -> Iterator[tuple[str, dict[str, Any]]]:
    yield from examples()
    yield from combinations()


def _attempt(build: Any) -> Any:
    try:
        return {"ok": build()}
    except (plan.PlanError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def _profile(control: ControlPlane, config_name: str) -> dict[str, Any]:
    config = control.endpoint_configs[config_name]
    variant = config.variants()[0]
    profile = control.variant_profile("chat", config, variant)
    assert profile is not None
    return {
        "profile": repr(profile),
        "decodeStepMs": [profile.decode_step_ms(b, 1024) for b in (1, 16)],
        "prefillMs": profile.prefill_ms(512),
        "alpha": [profile.acceptance_alpha(o) for o in (0.0, 0.5)],
        "stepFactor": [profile.speculative_step_factor(b) for b in (1, 32)],
        "kvTokens": profile.kv_capacity_tokens(),
        "batchLimit": profile.batch_limit(1024),
        "gpuMemory": profile.gpu_memory_utilization_percent(),
        "eval": [eval_outcome(profile, 7, f"item {i}", 0.7) for i in range(40)],
    }


def _served(spec: Any) -> dict[str, Any]:
    """Push the plan's requests through the sandbox and read the candidate's profile."""
    control = ControlPlane(SandboxConfig(time_scale=1e-9))
    out: dict[str, Any] = {}
    baseline = plan.baseline_model(spec, NAMES)
    control.handle("CreateModel", rq.create_model(baseline, OWNER.tag_value()))
    base_config = rq.create_endpoint_config(
        NAMES.baseline_config,
        [plan.variant(spec, NAMES.baseline_variant, baseline.name)],
        OWNER.tag_value(),
    )
    control.handle("CreateEndpointConfig", base_config)
    out["baseline"] = _profile(control, NAMES.baseline_config)
    job: JobView | None = None
    trained = plan.training_job(spec, NAMES)
    if trained is not None:
        control.handle(
            "CreateTrainingJob", training.create_training_job(trained, OWNER.tag_value())
        )
        control.advance()
        described = control.handle("DescribeTrainingJob", {"TrainingJobName": trained.name})
        state = training.training_job_state(described)
        job = JobView(trained.name, state.optimization_status, output_s3_uri=state.model_s3_uri)
    job_plan = plan.optimization_job(spec, NAMES)
    if job_plan is not None:
        control.handle(
            "CreateOptimizationJob", rq.create_optimization_job(job_plan, OWNER.tag_value())
        )
        control.advance()
        described = control.handle(
            "DescribeOptimizationJob", {"OptimizationJobName": job_plan.name}
        )
        job = JobView(
            job_plan.name,
            str(described["OptimizationJobStatus"]),
            output_s3_uri=str(described["OutputConfig"]["S3OutputLocation"]),
            recommended_image=str(
                described.get("OptimizationOutput", {}).get("RecommendedInferenceImage", "")
            ),
        )
    candidate = plan.candidate_model(spec, NAMES, job)
    control.handle("CreateModel", rq.create_model(candidate, OWNER.tag_value()))
    control.handle(
        "CreateEndpointConfig",
        rq.create_endpoint_config(
            NAMES.rollout_config,
            [plan.variant(spec, NAMES.candidate_variant, candidate.name)],
            OWNER.tag_value(),
        ),
    )
    out["candidate"] = _profile(control, NAMES.rollout_config)
    return out


def build(spec_data: dict[str, Any]) -> dict[str, Any]:
    """Everything the operator derives from one spec's techniques, as JSON-able values."""
    try:
        spec = parse_spec(spec_data)
    except (SpecError, ValidationError) as exc:
        return {"specError": str(exc)}
    result: dict[str, Any] = {
        "techniques": spec.optimizations.techniques(),
        "violations": [v.model_dump(mode="json") for v in matrix.check_optimizations(spec)],
        "hasCandidate": plan.has_candidate(spec),
        "baselineModel": _attempt(
            lambda: rq.create_model(plan.baseline_model(spec, NAMES), OWNER.tag_value())
        ),
    }
    if result["violations"]:
        return result

    def job_request() -> Any:
        job = plan.optimization_job(spec, NAMES)
        return None if job is None else rq.create_optimization_job(job, OWNER.tag_value())

    def training_request() -> Any:
        trained = plan.training_job(spec, NAMES)
        if trained is None:
            return None
        upload = training.upload_source_request(trained.source_s3_uri)
        body = upload.pop("Body")
        upload["BodySha256"] = hashlib.sha256(body).hexdigest()
        return {
            "upload": upload,
            "create": training.create_training_job(trained, OWNER.tag_value()),
            "dataclass": {k: str(v) for k, v in asdict(trained).items()},
        }

    result["optimizationJob"] = _attempt(job_request)
    result["trainingJob"] = _attempt(training_request)
    finished = JobView(
        NAMES.job, "COMPLETED", output_s3_uri="s3://bucket/out/opt/", recommended_image="img:opt"
    )
    result["candidateModel"] = _attempt(
        lambda: rq.create_model(plan.candidate_model(spec, NAMES, finished), OWNER.tag_value())
    )
    if not any("error" in result[k] for k in ("optimizationJob", "trainingJob", "candidateModel")):
        result["sandbox"] = _served(spec)
    return result


def canonical(value: Any) -> str:
    # Key order is kept: boto3 serializes dicts in insertion order, so it is on the wire.
    return json.dumps(value, separators=(",", ":"), default=str)


def digest(value: Any) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", type=Path, default=GOLDEN)
    parser.add_argument("--full", action="store_true", help="write every case in full (debug)")
    args = parser.parse_args()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with args.output.open("w", encoding="utf-8") as out:
        for case, spec in cases():
            built = build(spec)
            row: dict[str, Any] = {"case": case, "sha256": digest(built)}
            if args.full or case.startswith("example:"):
                row["built"] = built
            out.write(json.dumps(row, sort_keys=False) + "\n")


if __name__ == "__main__":
    main()

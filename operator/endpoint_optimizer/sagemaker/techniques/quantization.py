"""Quantization: an optimization job (fp8, awq, smoothquant) or llm-compressor in a training job.

Through an optimization job the LMI container quantizes as `OPTION_QUANTIZE` says, and
the candidate serves the job's output with the same variable. Through llm-compressor
(`via: llmCompressor`) a SageMaker training job writes a compressed-tensors checkpoint
(sagemaker/training.py builds that job), which vLLM serves and TensorRT-LLM cannot read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from endpoint_optimizer.api import (
    CompressorAlgorithm,
    OptimizedEndpointSpec,
    QuantizationScheme,
    QuantizationVia,
    WeightActivation,
)
from endpoint_optimizer.sagemaker import requests as rq
from endpoint_optimizer.sagemaker import training
from endpoint_optimizer.sagemaker.instances import FP8_FAMILIES, Backend
from endpoint_optimizer.sagemaker.techniques.base import Refuse, Target, Technique

CONFIG_MEMBER = "ModelQuantizationConfig"

# LMI's option.quantize values (reference §1.1); int8 is served by the SmoothQuant path.
LMI_QUANTIZE = {
    QuantizationScheme.FP8: "fp8",
    QuantizationScheme.AWQ: "awq",
    QuantizationScheme.GPTQ: "gptq",
    QuantizationScheme.SMOOTHQUANT: "smoothquant",
    QuantizationScheme.INT8: "smoothquant",
}

# The schemes an LMI optimization job accepts as OPTION_QUANTIZE, per engine.
JOB_SCHEMES: dict[Backend, tuple[QuantizationScheme, ...]] = {
    Backend.VLLM: (QuantizationScheme.AWQ, QuantizationScheme.FP8),
    Backend.TRTLLM: (
        QuantizationScheme.AWQ,
        QuantizationScheme.FP8,
        QuantizationScheme.SMOOTHQUANT,
    ),
    Backend.NEURON: (),
}

# llm-compressor algorithm -> weight x activation schemes it produces.
COMPRESSOR_SCHEMES: dict[CompressorAlgorithm, tuple[WeightActivation, ...]] = {
    CompressorAlgorithm.AWQ: (WeightActivation.W4A16,),
    CompressorAlgorithm.GPTQ: (
        WeightActivation.W4A16,
        WeightActivation.W8A8,
        WeightActivation.W8A16,
    ),
    CompressorAlgorithm.SMOOTHQUANT: (WeightActivation.W8A8,),
    CompressorAlgorithm.RTN: (
        WeightActivation.W4A16,
        WeightActivation.W8A8,
        WeightActivation.W8A16,
    ),
}


class Quantization(Technique):
    label = "quantization"
    config_members = (CONFIG_MEMBER,)
    uses_training_jobs = True
    runs_on_neuron = False
    rules: ClassVar[Mapping[str, str]] = {
        "fp8-needs-hardware": "FP8 needs FP8 tensor cores (H100/H200/B200, L4, L40S); A10G, "
        "A100 and T4 lack them.",
        "job-quantization-scheme": "An optimization job quantizes to awq or fp8 (vLLM), plus "
        "smoothquant with compilation (TensorRT-LLM); gptq and int8 go through llm-compressor.",
        "compressor-not-compilable": "llm-compressor checkpoints (compressed-tensors) are "
        "served by vLLM and cannot be compiled with TensorRT-LLM.",
        "compressor-scheme": "awq produces W4A16, smoothquant W8A8; gptq and rtn produce any "
        "of W4A16, W8A8, W8A16.",
        "compressor-group-size": "W8A8 is per-channel: groupSize applies to W4A16 and W8A16 only.",
    }

    def applies(self, spec: OptimizedEndpointSpec) -> bool:
        return spec.optimizations.quantization is not None

    def trains(self, spec: OptimizedEndpointSpec) -> bool:
        quant = spec.optimizations.quantization
        return quant is not None and quant.via is QuantizationVia.LLM_COMPRESSOR

    def check_parameters(self, spec: OptimizedEndpointSpec, target: Target, refuse: Refuse) -> None:
        quant = spec.optimizations.quantization
        device = target.device
        if quant is None or device is None or device.kind != "gpu":
            return
        if quant.via is QuantizationVia.OPTIMIZATION_JOB:
            scheme = quant.scheme
            assert scheme is not None  # the model requires it with via optimizationJob
            if scheme is QuantizationScheme.FP8 and not device.fp8:
                refuse(
                    "fp8-needs-hardware",
                    "spec.optimizations.quantization.scheme",
                    f"{spec.instance_type} ({device.name}) has no FP8 tensor cores",
                    ["scheme: awq", "via: llmCompressor (gptq W4A16 or W8A8)"]
                    + [f"ml.{f}.* for fp8" for f in FP8_FAMILIES],
                )
            elif scheme not in JOB_SCHEMES[target.engine]:
                allowed = [f"scheme: {s.value}" for s in JOB_SCHEMES[target.engine]]
                if scheme is QuantizationScheme.SMOOTHQUANT:
                    message = "smoothquant (INT8) runs only on TensorRT-LLM, i.e. with compilation"
                    allowed = ["add optimizations.compilation", *allowed]
                else:
                    message = (
                        f"the optimization job's {target.engine.value} engine cannot quantize to "
                        f"{scheme.value}"
                    )
                refuse(
                    "job-quantization-scheme",
                    "spec.optimizations.quantization.scheme",
                    message,
                    [*allowed, "via: llmCompressor (gptq, rtn: W4A16 | W8A8 | W8A16)"],
                )
            return

        # llm-compressor writes compressed-tensors checkpoints, which vLLM serves and
        # TensorRT-LLM compilation cannot read.
        if target.engine is Backend.TRTLLM:
            refuse(
                "compressor-not-compilable",
                "spec.optimizations.compilation",
                "llm-compressor checkpoints are served by vLLM and cannot be compiled with "
                "TensorRT-LLM",
                [
                    "remove compilation",
                    "quantization.via: optimizationJob (awq | fp8 | smoothquant)",
                ],
            )
        algorithm = quant.algorithm
        assert algorithm is not None and quant.weight_activation is not None
        if quant.weight_activation not in COMPRESSOR_SCHEMES[algorithm]:
            refuse(
                "compressor-scheme",
                "spec.optimizations.quantization.weightActivation",
                f"{algorithm.value} does not produce {quant.weight_activation.value}",
                [f"weightActivation: {w.value}" for w in COMPRESSOR_SCHEMES[algorithm]],
            )
        if quant.weight_activation is WeightActivation.W8A8 and quant.group_size is not None:
            refuse(
                "compressor-group-size",
                "spec.optimizations.quantization.groupSize",
                "W8A8 quantizes weights per channel; groupSize applies to W4A16 and W8A16",
                ["omit groupSize", "weightActivation: W4A16 | W8A16"],
            )

    def job_configs(self, spec: OptimizedEndpointSpec) -> list[rq.OptimizationConfig]:
        quant = spec.optimizations.quantization
        if quant is None or quant.via is not QuantizationVia.OPTIMIZATION_JOB:
            return []
        scheme = quant.scheme or QuantizationScheme.FP8
        return [
            rq.container_config(
                CONFIG_MEMBER,
                image=quant.image,
                override_environment={"OPTION_QUANTIZE": LMI_QUANTIZE[scheme]},
            )
        ]

    def training_job(
        self, spec: OptimizedEndpointSpec, name: str, network: rq.Network | None = None
    ) -> training.QuantizationTrainingJob | None:
        return training.training_job_for(spec, name, network)

    def job_conflict(self, spec: OptimizedEndpointSpec, job_members: list[str]) -> str | None:
        # The training job's checkpoint is the candidate's weights; an optimization job
        # would start from the original weights instead.
        if self.trains(spec) and job_members:
            return (
                "spec.optimizations.quantization.via: llmCompressor cannot be combined with "
                "compilation, sharding or EAGLE training; remove them or quantize with "
                "via: optimizationJob"
            )
        return None


QUANTIZATION = Quantization()

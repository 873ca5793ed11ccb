"""One-shot post-training quantization with llm-compressor, run inside a SageMaker training job.

This file is the training job's entry point (`sagemaker_program`): the job builder
(`endpoint_optimizer.sagemaker.training`) uploads it alone, with a requirements.txt, and
the PyTorch training container runs it as a script. So it imports nothing from the rest
of the package. The operator imports it too, for the one table of supported
algorithm/scheme pairs and the hyperparameter model; torch, transformers, datasets and
llmcompressor are therefore imported only inside the functions that run in the job.

Inputs follow the SageMaker training contract: the model and tokenizer in the `model`
channel (SM_CHANNEL_MODEL, /opt/ml/input/data/model), hyperparameters in SM_HPS or
/opt/ml/input/config/hyperparameters.json, the compressed checkpoint written to
SM_MODEL_DIR (/opt/ml/model). Each stage prints one JSON line; a failure also goes to
/opt/ml/output/failure, which SageMaker reports as the job's FailureReason.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class Algorithm(StrEnum):
    AWQ = "awq"
    GPTQ = "gptq"
    SMOOTHQUANT = "smoothquant"  # SmoothQuant smoothing, then GPTQ
    RTN = "rtn"  # round-to-nearest (llm-compressor's QuantizationModifier), data-free


class Scheme(StrEnum):
    W4A16 = "W4A16"
    W8A16 = "W8A16"
    W8A8 = "W8A8"


# The one table of what this entry point can produce. The job builder checks a spec
# against it before any AWS call; the entry point checks again in the job.
# AWQ protects salient weight channels of low-bit weight-only schemes; SmoothQuant moves
# activation outliers into the weights and only helps when activations are quantized.
SUPPORTED_SCHEMES: Mapping[Algorithm, frozenset[Scheme]] = {
    Algorithm.AWQ: frozenset({Scheme.W4A16}),
    Algorithm.GPTQ: frozenset({Scheme.W4A16, Scheme.W8A16, Scheme.W8A8}),
    Algorithm.SMOOTHQUANT: frozenset({Scheme.W8A8}),
    Algorithm.RTN: frozenset({Scheme.W4A16, Scheme.W8A16, Scheme.W8A8}),
}

# Weight-only schemes quantize weights per group of input columns; W8A8 per output channel.
GROUPED_SCHEMES = frozenset({Scheme.W4A16, Scheme.W8A16})
DEFAULT_GROUP_SIZE = 128

BUNDLED_CALIBRATION_SETS = ("synthetic-chat",)
CHANNEL_PREFIX = "channel:"
HUB_PREFIX = "hf:"
# A Hugging Face dataset is streamed; this many times num_samples rows are read from the
# head of the split and the sample is drawn from them with the seed.
HUB_OVERSAMPLE = 4

# What the training container installs from the uploaded requirements.txt. The PyTorch
# 2.10 training image already satisfies llmcompressor's torch range (>=2.10,<=2.14), so
# pip keeps the image's CUDA build of torch.
JOB_REQUIREMENTS = ("llmcompressor==0.14.0.1",)

EXIT_BAD_HYPERPARAMETERS = 2
EXIT_QUANTIZATION_FAILED = 1


def allowed_pairs_text() -> str:
    """The supported pairs as one line, for error messages and docs."""
    return "; ".join(
        f"{algorithm.value}: {', '.join(sorted(s.value for s in schemes))}"
        for algorithm, schemes in SUPPORTED_SCHEMES.items()
    )


class UnsupportedPairError(ValueError):
    """The algorithm cannot produce the scheme (see SUPPORTED_SCHEMES)."""

    def __init__(self, algorithm: Algorithm, scheme: Scheme) -> None:
        super().__init__(
            f"hyperparameters algorithm={algorithm.value!r} and scheme={scheme.value!r} "
            f"are not a supported pair; choose one of: {allowed_pairs_text()}"
        )
        self.algorithm = algorithm
        self.scheme = scheme


def check_pair(algorithm: Algorithm, scheme: Scheme) -> None:
    if scheme not in SUPPORTED_SCHEMES[algorithm]:
        raise UnsupportedPairError(algorithm, scheme)


def _names(value: object) -> object:
    # SageMaker hyperparameters are strings; accept "a,b" as well as a JSON list.
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class QuantizeHyperparameters(BaseModel):
    """The training job's hyperparameters, validated once on both sides of the boundary."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    algorithm: Algorithm
    scheme: Scheme
    symmetric: bool = True  # filled per algorithm when absent: AWQ's default is zero points
    group_size: int | None = Field(default=None, ge=1)
    calibration_dataset: str = "synthetic-chat"
    calibration_split: str = Field(default="train", min_length=1)
    text_field: str = Field(default="text", min_length=1)
    num_samples: int = Field(default=256, ge=1)
    max_seq_length: int = Field(default=2048, ge=8)
    ignore: list[str] = Field(default_factory=lambda: ["lm_head"])
    targets: list[str] = Field(default_factory=lambda: ["Linear"], min_length=1)
    seed: int = 0
    smoothing_strength: float = Field(default=0.8, ge=0.0, le=1.0)

    @model_validator(mode="before")
    @classmethod
    def _symmetric_default(cls, data: object) -> object:
        # AWQ's published W4A16 recipes are asymmetric (W4A16_ASYM); the spec agrees.
        if isinstance(data, dict) and "symmetric" not in data:
            algorithm = str(data.get("algorithm", "")).strip().lower()
            return {**data, "symmetric": algorithm != Algorithm.AWQ.value}
        return data

    @field_validator("algorithm", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("scheme", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("ignore", "targets", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return _names(value)

    @field_validator("calibration_dataset")
    @classmethod
    def _dataset(cls, value: str) -> str:
        if value.startswith(CHANNEL_PREFIX):
            channel = value.removeprefix(CHANNEL_PREFIX)
            if not channel or not all(c.isalnum() or c in "-_." for c in channel):
                raise ValueError(
                    f"calibration_dataset {value!r}: give channel:<name> with the name of a "
                    "training-job input channel ([A-Za-z0-9.-_])"
                )
            return value
        if value.startswith(HUB_PREFIX):
            dataset = value.removeprefix(HUB_PREFIX)
            if not dataset or not all(c.isalnum() or c in "-_./" for c in dataset):
                raise ValueError(
                    f"calibration_dataset {value!r}: give hf:<dataset id>, e.g. "
                    "hf:HuggingFaceH4/ultrachat_200k"
                )
            return value
        if value not in BUNDLED_CALIBRATION_SETS:
            raise ValueError(
                f"calibration_dataset {value!r} is none of channel:<name>, hf:<dataset id> "
                f"or a bundled set ({', '.join(BUNDLED_CALIBRATION_SETS)})"
            )
        return value

    @model_validator(mode="after")
    def _pair(self) -> QuantizeHyperparameters:
        check_pair(self.algorithm, self.scheme)
        if self.group_size is not None and self.scheme not in GROUPED_SCHEMES:
            raise ValueError(
                f"hyperparameter group_size applies to W4A16 and W8A16 only; "
                f"scheme {self.scheme.value} quantizes weights per output channel: remove it"
            )
        return self

    @property
    def effective_group_size(self) -> int | None:
        if self.scheme in GROUPED_SCHEMES:
            return self.group_size or DEFAULT_GROUP_SIZE
        return None

    @property
    def needs_calibration(self) -> bool:
        # RTN with dynamic per-token activations computes no statistics from data.
        return self.algorithm is not Algorithm.RTN

    @property
    def calibration_channel(self) -> str | None:
        if self.calibration_dataset.startswith(CHANNEL_PREFIX):
            return self.calibration_dataset.removeprefix(CHANNEL_PREFIX)
        return None

    @property
    def calibration_hub_dataset(self) -> str | None:
        if self.calibration_dataset.startswith(HUB_PREFIX):
            return self.calibration_dataset.removeprefix(HUB_PREFIX)
        return None

    def to_sagemaker(self) -> dict[str, str]:
        """JSON-encoded values, as the SageMaker SDK's framework estimators send them."""
        values = self.model_dump(mode="json", exclude_none=True)
        return {key: json.dumps(value) for key, value in values.items()}

    @classmethod
    def from_sagemaker(cls, raw: Mapping[str, object]) -> QuantizeHyperparameters:
        """Parse SM_HPS (decoded values) or hyperparameters.json (JSON-encoded strings).

        The `sagemaker_*` keys belong to the training toolkit and are dropped.
        """
        values: dict[str, object] = {}
        for key, value in raw.items():
            if key.startswith("sagemaker_"):
                continue
            if isinstance(value, str):
                with contextlib.suppress(json.JSONDecodeError):  # a bare string: gptq
                    value = json.loads(value)
            values[key] = value
        return cls.model_validate(values)


@dataclass(frozen=True)
class JobPaths:
    """Where the training contract puts things; every path can be moved for tests."""

    model: Path
    output_model: Path
    output_data: Path
    failure: Path
    channels: Mapping[str, Path] = field(default_factory=dict)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> JobPaths:
        data_root = Path(environ.get("SM_INPUT_DATA_DIR", "/opt/ml/input/data"))
        channels: dict[str, Path] = {}
        for key, value in environ.items():
            if key.startswith("SM_CHANNEL_") and key != "SM_CHANNELS":
                channels[key.removeprefix("SM_CHANNEL_").lower()] = Path(value)
        if data_root.is_dir():
            for child in data_root.iterdir():
                channels.setdefault(child.name.lower(), child)
        output_dir = Path(environ.get("SM_OUTPUT_DIR", "/opt/ml/output"))
        return cls(
            model=channels.get("model", data_root / "model"),
            output_model=Path(environ.get("SM_MODEL_DIR", "/opt/ml/model")),
            output_data=Path(environ.get("SM_OUTPUT_DATA_DIR", str(output_dir / "data"))),
            failure=output_dir / "failure",
            channels=channels,
        )

    def channel(self, name: str) -> Path:
        path = self.channels.get(name.lower())
        if path is None or not path.is_dir():
            raise FileNotFoundError(
                f"calibration_dataset names channel {name!r}, but the training job has no "
                f"such input channel (have: {', '.join(sorted(self.channels)) or 'none'}); "
                "add it to InputDataConfig"
            )
        return path


def read_hyperparameters(environ: Mapping[str, str]) -> QuantizeHyperparameters:
    if "SM_HPS" in environ:
        raw: object = json.loads(environ["SM_HPS"])
    else:
        config = Path(environ.get("SM_INPUT_CONFIG_DIR", "/opt/ml/input/config"))
        raw = json.loads((config / "hyperparameters.json").read_text())
    if not isinstance(raw, dict):
        raise ValueError("hyperparameters must be a JSON object of name to value")
    return QuantizeHyperparameters.from_sagemaker(raw)


def log_stage(stage: str, **fields: object) -> None:
    """One JSON line per stage on stdout, which SageMaker ships to CloudWatch Logs.

    Only names, counts and timings: never calibration text.
    """
    print(json.dumps({"stage": stage, **fields}, default=str), flush=True)


# ---- calibration data -------------------------------------------------------------------

_TOPICS = (
    "the water cycle",
    "binary search",
    "photosynthesis",
    "compound interest",
    "the French revolution",
    "TCP handshakes",
    "sourdough bread",
    "black holes",
    "unit testing",
    "supply and demand",
    "the immune system",
    "public key cryptography",
)
_ASKS = (
    "Explain {t} to a new colleague in three sentences.",
    "What are the most common mistakes people make about {t}?",
    "Write a short checklist for learning {t}.",
    "Summarise {t} and give one concrete example.",
    "Compare {t} with something from everyday life.",
)
_ANSWERS = (
    "In short, {t} comes down to a few steps that build on each other. First, ",
    "A good way to think about {t} is as a process with inputs and outputs: ",
    "Here is a compact overview of {t}, with an example at the end. ",
)


def synthetic_chat(count: int, seed: int) -> list[list[dict[str, str]]]:
    """A small bundled calibration set: varied chat turns, no download needed.

    It exercises the chat template and typical token statistics; real traffic samples
    given as a channel calibrate better.
    """
    rng = random.Random(seed)
    conversations = []
    for index in range(count):
        topic = _TOPICS[index % len(_TOPICS)]
        a, b = rng.randint(2, 999), rng.randint(2, 999)
        conversations.append(
            [
                {"role": "system", "content": "You are a concise, helpful assistant."},
                {
                    "role": "user",
                    "content": rng.choice(_ASKS).format(t=topic) + f" Also, what is {a} + {b}?",
                },
                {
                    "role": "assistant",
                    "content": rng.choice(_ANSWERS).format(t=topic) + f"And {a} + {b} = {a + b}.",
                },
            ]
        )
    return conversations


Record = list[dict[str, str]] | str  # chat messages, or plain text


def record_from(item: object, text_field: str, where: str) -> Record:
    """A chat record ({"messages": [...]}) or a text record (the `text_field` string)."""
    if isinstance(item, Mapping):
        messages = item.get("messages")
        if isinstance(messages, list):
            return [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]
        text = item.get(text_field)
        if isinstance(text, str):
            return text
    raise ValueError(
        f"{where}: a calibration record needs a 'messages' list (chat turns with role and "
        f"content) or a {text_field!r} string (hyperparameter text_field)"
    )


def read_channel_records(directory: Path, text_field: str = "text") -> Iterator[Record]:
    """Records from every .jsonl/.json file of a channel, in file-name order."""
    files = sorted(p for p in directory.rglob("*") if p.suffix in {".jsonl", ".json"})
    if not files:
        raise FileNotFoundError(f"calibration channel {directory} holds no .jsonl or .json file")
    for path in files:
        if path.suffix == ".json":
            document = json.loads(path.read_text())
            items = document if isinstance(document, list) else [document]
            for number, item in enumerate(items):
                yield record_from(item, text_field, f"{path.name} item {number}")
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if line.strip():
                yield record_from(json.loads(line), text_field, f"{path.name} line {number}")


def read_hub_records(hp: QuantizeHyperparameters, dataset_id: str) -> list[Record]:
    """The head of a Hugging Face dataset split, streamed (the job needs internet access)."""
    from datasets import load_dataset

    rows = load_dataset(dataset_id, split=hp.calibration_split, streaming=True)
    wanted = hp.num_samples * HUB_OVERSAMPLE
    records: list[Record] = []
    for number, item in enumerate(rows):
        if number >= wanted:
            break
        records.append(record_from(item, hp.text_field, f"{dataset_id} row {number}"))
    return records


def calibration_records(hp: QuantizeHyperparameters, paths: JobPaths) -> list[Record]:
    """The requested number of records, chosen reproducibly from `seed`."""
    channel, hub = hp.calibration_channel, hp.calibration_hub_dataset
    records: list[Record]
    if channel is not None:
        records = list(read_channel_records(paths.channel(channel), hp.text_field))
    elif hub is not None:
        records = read_hub_records(hp, hub)
    else:
        records = list(synthetic_chat(max(hp.num_samples, 64), hp.seed))
    random.Random(hp.seed).shuffle(records)
    return records[: hp.num_samples]


def tokenize_records(
    records: list[Record], tokenizer: Any, max_seq_length: int
) -> list[dict[str, list[int]]]:
    """Chat template applied, tokenized, truncated to max_seq_length."""
    rows = []
    for record in records:
        if isinstance(record, str):
            text = record
        else:
            if not getattr(tokenizer, "chat_template", None):
                raise ValueError(
                    "the calibration records are chat messages but the model's tokenizer has no "
                    "chat_template; add one to tokenizer_config.json or give 'text' records"
                )
            text = tokenizer.apply_chat_template(record, tokenize=False)
        encoded = tokenizer(
            text, truncation=True, max_length=max_seq_length, add_special_tokens=False
        )
        if encoded["input_ids"]:
            rows.append(
                {
                    "input_ids": list(encoded["input_ids"]),
                    "attention_mask": list(encoded["attention_mask"]),
                }
            )
    if not rows:
        raise ValueError("the calibration set is empty after tokenization")
    return rows


# ---- the recipe -------------------------------------------------------------------------


def quantization_scheme(hp: QuantizeHyperparameters) -> Any:
    """compressed-tensors' preset for the scheme, with the requested symmetry and group size."""
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationScheme,
        preset_name_to_scheme,
    )

    preset = preset_name_to_scheme(hp.scheme.value, list(hp.targets))
    weights = preset.weights.model_dump()
    weights["symmetric"] = hp.symmetric
    if hp.effective_group_size is not None:
        weights["group_size"] = hp.effective_group_size
    return QuantizationScheme(
        targets=list(hp.targets),
        weights=QuantizationArgs(**weights),
        input_activations=preset.input_activations,
    )


def build_recipe(hp: QuantizeHyperparameters) -> list[Any]:
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier

    groups = {"group_0": quantization_scheme(hp)}
    ignore = list(hp.ignore)
    if hp.algorithm is Algorithm.GPTQ:
        return [GPTQModifier(config_groups=groups, ignore=ignore)]
    if hp.algorithm is Algorithm.SMOOTHQUANT:
        from llmcompressor.modifiers.transform import SmoothQuantModifier

        return [
            SmoothQuantModifier(smoothing_strength=hp.smoothing_strength),
            GPTQModifier(config_groups=groups, ignore=ignore),
        ]
    if hp.algorithm is Algorithm.AWQ:
        from llmcompressor.modifiers.transform import AWQModifier

        return [
            AWQModifier(duo_scaling="both"),
            QuantizationModifier(config_groups=groups, ignore=ignore),
        ]
    return [QuantizationModifier(config_groups=groups, ignore=ignore)]


def _allow_awq_without_accelerator() -> None:
    # llmcompressor 0.14.0.1's AWQ pins cached activations unconditionally, which raises
    # "Cannot access accelerator device when none is available" on a CPU-only host.
    # Pinning only speeds host-to-device copies, so skipping it without a device is safe.
    import torch

    if torch.accelerator.is_available():
        return
    from llmcompressor.pipelines.cache import IntermediatesCache

    def _no_pin(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    IntermediatesCache.pin_memory = _no_pin


# ---- the run ----------------------------------------------------------------------------


@dataclass(frozen=True)
class QuantizeResult:
    output_dir: Path
    calibration_samples: int
    calibration_tokens: int
    seconds: dict[str, float]


def run(hp: QuantizeHyperparameters, paths: JobPaths) -> QuantizeResult:
    """Load, calibrate, quantize, save. Raises on failure; `main` maps that to an exit code."""
    seconds: dict[str, float] = {}

    if not (paths.model / "config.json").is_file():
        raise FileNotFoundError(
            f"the model channel {paths.model} has no config.json: point the 'model' input "
            "channel at an uncompressed Hugging Face checkpoint folder (S3Prefix)"
        )
    started = time.monotonic()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(paths.model)
    model = AutoModelForCausalLM.from_pretrained(paths.model, dtype="auto")
    seconds["load_model"] = time.monotonic() - started
    log_stage(
        "load_model",
        architecture=type(model).__name__,
        parameters=sum(p.numel() for p in model.parameters()),
        dtype=str(next(model.parameters()).dtype),
        seconds=round(seconds["load_model"], 3),
    )

    dataset = None
    samples = tokens = 0
    if hp.needs_calibration:
        started = time.monotonic()
        from datasets import Dataset

        rows = tokenize_records(calibration_records(hp, paths), tokenizer, hp.max_seq_length)
        dataset = Dataset.from_list(rows)
        samples, tokens = len(rows), sum(len(r["input_ids"]) for r in rows)
        seconds["calibration_set"] = time.monotonic() - started
        log_stage(
            "calibration_set",
            source=hp.calibration_dataset,
            samples=samples,
            tokens=tokens,
            max_seq_length=hp.max_seq_length,
            seconds=round(seconds["calibration_set"], 3),
        )

    started = time.monotonic()
    from llmcompressor import oneshot

    if hp.algorithm is Algorithm.AWQ:
        _allow_awq_without_accelerator()
    recipe = build_recipe(hp)
    # A seeded generator and no shuffling make two runs on the same inputs give the
    # same checkpoint; llm-compressor's default shuffle is unseeded.
    torch.manual_seed(hp.seed)
    oneshot_args: dict[str, Any] = {"model": model, "recipe": recipe, "tokenizer": tokenizer}
    if dataset is not None:
        oneshot_args |= {
            "dataset": dataset,
            "num_calibration_samples": samples,
            "max_seq_length": hp.max_seq_length,
            "shuffle_calibration_samples": False,
        }
    model = oneshot(**oneshot_args)
    seconds["oneshot"] = time.monotonic() - started
    log_stage(
        "oneshot",
        algorithm=hp.algorithm.value,
        scheme=hp.scheme.value,
        group_size=hp.effective_group_size,
        symmetric=hp.symmetric,
        modifiers=[type(m).__name__ for m in recipe],
        seconds=round(seconds["oneshot"], 3),
    )

    started = time.monotonic()
    paths.output_model.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(paths.output_model, save_compressed=True)
    tokenizer.save_pretrained(paths.output_model)
    seconds["save"] = time.monotonic() - started
    size = sum(p.stat().st_size for p in paths.output_model.rglob("*.safetensors"))
    log_stage("save", safetensors_bytes=size, seconds=round(seconds["save"], 3))

    result = QuantizeResult(paths.output_model, samples, tokens, seconds)
    paths.output_data.mkdir(parents=True, exist_ok=True)
    (paths.output_data / "quantize-summary.json").write_text(
        json.dumps(
            {
                "hyperparameters": hp.model_dump(mode="json"),
                "calibrationSamples": samples,
                "calibrationTokens": tokens,
                "seconds": {k: round(v, 3) for k, v in seconds.items()},
            },
            indent=2,
        )
    )
    return result


def _fail(paths: JobPaths | None, message: str) -> None:
    log_stage("failed", error=message)
    if paths is not None and paths.failure.parent.is_dir():
        # SageMaker copies this file into DescribeTrainingJob.FailureReason (≤1024 chars).
        paths.failure.write_text(message[:1024])


def main(environ: Mapping[str, str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    env = os.environ if environ is None else environ
    paths: JobPaths | None = None
    try:
        paths = JobPaths.from_environ(env)
        hp = read_hyperparameters(env)
    except (ValidationError, ValueError, OSError) as error:
        _fail(paths, f"bad hyperparameters: {error}")
        return EXIT_BAD_HYPERPARAMETERS
    log_stage("hyperparameters", **hp.model_dump(mode="json"))
    try:
        result = run(hp, paths)
    except Exception as error:
        _fail(paths, f"{type(error).__name__}: {error}")
        return EXIT_QUANTIZATION_FAILED
    log_stage(
        "done", output_dir=str(result.output_dir), seconds=round(sum(result.seconds.values()), 3)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

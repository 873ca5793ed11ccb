"""Real llm-compressor runs of the entry point, on the CPU, on a tiny random Llama.

Each test quantizes the same tiny checkpoint in-process, reloads the output with plain
transformers, checks the compressed-tensors config of the requested scheme and compares
the logits with the unquantized model on chat prompts.

Stated tolerances, as the relative Frobenius error ‖Δlogits‖/‖logits‖ over all positions
(measured on this model: GPTQ W4A16 ≈ 0.15, SmoothQuant+GPTQ W8A8 ≈ 0.015, AWQ W4A16
asym ≈ 0.26, see shared/reference/llm-compressor.md §4): 4-bit ≤ 0.35, 8-bit ≤ 0.05.
A lower bound shows the weights really were rounded.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from endpoint_optimizer.jobs import quantize
from endpoint_optimizer.jobs.quantize import JobPaths, QuantizeHyperparameters

pytestmark = [
    pytest.mark.quantize,
    pytest.mark.skipif(
        importlib.util.find_spec("llmcompressor") is None,
        reason="llmcompressor is not installed: pip install -e '.[quantize]'",
    ),
]

PROMPTS = [
    [{"role": "user", "content": "What is 12 plus 30?"}],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "the server measures the latency"},
    ],
    [{"role": "user", "content": "Explain the baseline to my team."}],
]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Any:
    # The suite shares 2 cores with other processes; torch's default of one thread per
    # core oversubscribes them and made these runs 5-10x slower. One thread is steady.
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.unit.jobs.tiny_llama import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def reference_logits(tiny_model: Path) -> list[Any]:
    return _logits(tiny_model, tiny_model)


def _logits(checkpoint: Path, tokenizer_dir: Path) -> list[Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    model.eval()
    out = []
    with torch.no_grad():
        for messages in PROMPTS:
            ids = tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )["input_ids"]
            out.append(model(input_ids=ids).logits[0])
    return out


def _relative_error(reference: list[Any], candidate: list[Any]) -> float:
    import torch

    ref = torch.cat(reference)
    cand = torch.cat(candidate)
    return float(torch.linalg.norm(cand - ref) / torch.linalg.norm(ref))


def _quantize(tiny_model: Path, out: Path, **hyperparameters: Any) -> Path:
    hp = QuantizeHyperparameters.model_validate(hyperparameters)
    paths = JobPaths(
        model=tiny_model,
        output_model=out / "model",
        output_data=out / "data",
        failure=out / "failure",
    )
    result = quantize.run(hp, paths)
    assert result.calibration_samples == hp.num_samples
    return result.output_dir


def _quantization_config(checkpoint: Path) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((checkpoint / "config.json").read_text())
    qc: dict[str, Any] = config["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors"
    assert qc["quantization_status"] == "compressed"
    assert qc["ignore"] == ["lm_head"]
    return qc


def test_gptq_w4a16_checkpoint_is_int4_grouped_and_close_to_the_original(
    tiny_model: Path, reference_logits: list[Any], tmp_path: Path
) -> None:
    checkpoint = _quantize(
        tiny_model, tmp_path, algorithm="gptq", scheme="W4A16", num_samples=8, max_seq_length=64
    )
    qc = _quantization_config(checkpoint)
    assert qc["format"] == "pack-quantized"
    weights = qc["config_groups"]["group_0"]["weights"]
    assert (weights["num_bits"], weights["type"], weights["strategy"]) == (4, "int", "group")
    assert (weights["group_size"], weights["symmetric"]) == (128, True)
    assert qc["config_groups"]["group_0"]["input_activations"] is None

    error = _relative_error(reference_logits, _logits(checkpoint, checkpoint))
    assert 1e-3 < error <= 0.35


def test_smoothquant_gptq_w8a8_checkpoint_quantizes_activations_and_stays_close(
    tiny_model: Path, reference_logits: list[Any], tmp_path: Path
) -> None:
    checkpoint = _quantize(
        tiny_model,
        tmp_path,
        algorithm="smoothquant",
        scheme="W8A8",
        num_samples=8,
        max_seq_length=64,
    )
    qc = _quantization_config(checkpoint)
    assert qc["format"] == "int-quantized"
    group = qc["config_groups"]["group_0"]
    assert (group["weights"]["num_bits"], group["weights"]["strategy"]) == (8, "channel")
    activations = group["input_activations"]
    assert (activations["num_bits"], activations["strategy"]) == (8, "token")
    assert activations["dynamic"] is True
    recipe = (checkpoint / "recipe.yaml").read_text()
    assert "SmoothQuantModifier" in recipe
    assert "GPTQModifier" in recipe

    error = _relative_error(reference_logits, _logits(checkpoint, checkpoint))
    assert 1e-4 < error <= 0.05


def test_awq_w4a16_asymmetric_checkpoint_carries_zero_points_and_stays_close(
    tiny_model: Path, reference_logits: list[Any], tmp_path: Path
) -> None:
    checkpoint = _quantize(
        tiny_model,
        tmp_path,
        algorithm="awq",
        scheme="W4A16",
        symmetric=False,
        num_samples=4,
        max_seq_length=32,
    )
    qc = _quantization_config(checkpoint)
    weights = qc["config_groups"]["group_0"]["weights"]
    assert (weights["num_bits"], weights["symmetric"], weights["group_size"]) == (4, False, 128)
    from safetensors import safe_open

    with safe_open(str(checkpoint / "model.safetensors"), framework="pt") as tensors:
        assert "model.layers.0.self_attn.q_proj.weight_zero_point" in set(tensors.keys())

    error = _relative_error(reference_logits, _logits(checkpoint, checkpoint))
    assert 1e-3 < error <= 0.45


def test_entrypoint_runs_from_the_training_job_contract(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The layout and encodings a SageMaker training container hands the script.
    calibration = tmp_path / "input" / "data" / "calibration"
    calibration.mkdir(parents=True)
    samples = [
        {"messages": [{"role": "user", "content": f"What is {i} plus {i}?"}]} for i in range(6)
    ]
    (calibration / "items.jsonl").write_text("\n".join(json.dumps(s) for s in samples))
    config = tmp_path / "input" / "config"
    config.mkdir(parents=True)
    hyperparameters = QuantizeHyperparameters(
        algorithm="gptq",
        scheme="W8A16",
        calibration_dataset="channel:calibration",
        num_samples=4,
        max_seq_length=32,
    ).to_sagemaker() | {"sagemaker_program": '"quantize.py"'}
    (config / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    (tmp_path / "output").mkdir()
    environ = {
        "SM_CHANNEL_MODEL": str(tiny_model),
        "SM_CHANNEL_CALIBRATION": str(calibration),
        "SM_INPUT_CONFIG_DIR": str(config),
        "SM_OUTPUT_DIR": str(tmp_path / "output"),
        "SM_MODEL_DIR": str(tmp_path / "model"),
    }

    assert quantize.main(environ) == 0

    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    stages = [line["stage"] for line in lines]
    assert stages == ["hyperparameters", "load_model", "calibration_set", "oneshot", "save", "done"]
    calibration_line = lines[2]
    assert (calibration_line["source"], calibration_line["samples"]) == ("channel:calibration", 4)
    assert not (tmp_path / "output" / "failure").exists()
    summary = json.loads((tmp_path / "output" / "data" / "quantize-summary.json").read_text())
    assert summary["calibrationSamples"] == 4
    qc = _quantization_config(tmp_path / "model")
    assert qc["config_groups"]["group_0"]["weights"]["num_bits"] == 8
    assert (tmp_path / "model" / "tokenizer.json").is_file()


def test_same_seed_gives_a_byte_identical_checkpoint(tiny_model: Path, tmp_path: Path) -> None:
    # llm-compressor shuffles calibration samples without a seed by default; the entry
    # point draws them with `seed` and turns that shuffle off.
    import hashlib

    digests = []
    for run in ("a", "b"):
        checkpoint = _quantize(
            tiny_model,
            tmp_path / run,
            algorithm="gptq",
            scheme="W4A16",
            num_samples=4,
            max_seq_length=32,
            seed=5,
        )
        digests.append(hashlib.sha256((checkpoint / "model.safetensors").read_bytes()).hexdigest())
    assert digests[0] == digests[1]

"""The entry point's hyperparameters, calibration records and failure path (no torch needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from endpoint_optimizer.jobs import quantize
from endpoint_optimizer.jobs.quantize import (
    SUPPORTED_SCHEMES,
    Algorithm,
    JobPaths,
    QuantizeHyperparameters,
    Scheme,
    UnsupportedPairError,
)


def test_sagemaker_encoded_strings_parse_to_typed_values() -> None:
    # hyperparameters.json as the SDK writes it: every value a JSON-encoded string.
    raw = {
        "algorithm": '"GPTQ"',
        "scheme": '"w4a16"',
        "symmetric": "false",
        "group_size": "64",
        "num_samples": "32",
        "max_seq_length": "512",
        "ignore": '["lm_head", "re:.*gate$"]',
        "targets": "Linear",
        "seed": "7",
        "sagemaker_program": '"quantize.py"',
        "sagemaker_submit_directory": '"s3://bucket/src/sourcedir.tar.gz"',
    }
    hp = QuantizeHyperparameters.from_sagemaker(raw)
    assert (hp.algorithm, hp.scheme) == (Algorithm.GPTQ, Scheme.W4A16)
    assert hp.symmetric is False
    assert hp.effective_group_size == 64
    assert hp.ignore == ["lm_head", "re:.*gate$"]
    assert hp.targets == ["Linear"]
    assert (hp.num_samples, hp.max_seq_length, hp.seed) == (32, 512, 7)


def test_round_trip_through_sagemaker_encoding_is_lossless() -> None:
    hp = QuantizeHyperparameters(
        algorithm=Algorithm.SMOOTHQUANT,
        scheme=Scheme.W8A8,
        calibration_dataset="channel:calibration",
        smoothing_strength=0.5,
        ignore=["lm_head"],
    )
    encoded = hp.to_sagemaker()
    assert all(isinstance(v, str) for v in encoded.values())
    assert encoded["algorithm"] == '"smoothquant"'
    assert QuantizeHyperparameters.from_sagemaker(encoded) == hp


@pytest.mark.parametrize(
    ("algorithm", "scheme"),
    [(a, s) for a in Algorithm for s in Scheme if s not in SUPPORTED_SCHEMES[a]],
)
def test_unsupported_pair_names_both_hyperparameters_and_the_allowed_pairs(
    algorithm: Algorithm, scheme: Scheme
) -> None:
    with pytest.raises(ValidationError) as info:
        QuantizeHyperparameters(algorithm=algorithm, scheme=scheme)
    message = str(info.value)
    assert f"algorithm={algorithm.value!r}" in message
    assert f"scheme={scheme.value!r}" in message
    assert "gptq: W4A16, W8A16, W8A8" in message


def test_check_pair_raises_a_typed_error() -> None:
    with pytest.raises(UnsupportedPairError) as info:
        quantize.check_pair(Algorithm.AWQ, Scheme.W8A8)
    assert info.value.algorithm is Algorithm.AWQ


def test_group_size_is_refused_for_a_per_channel_scheme() -> None:
    with pytest.raises(ValidationError, match="group_size applies to W4A16 and W8A16 only"):
        QuantizeHyperparameters(algorithm="gptq", scheme="W8A8", group_size=64)


def test_unknown_hyperparameter_is_refused_by_name() -> None:
    with pytest.raises(ValidationError, match="groupsize"):
        QuantizeHyperparameters.from_sagemaker(
            {"algorithm": "gptq", "scheme": "W4A16", "groupsize": "64"}
        )


@pytest.mark.parametrize("dataset", ["ultrachat", "channel:", "channel:bad/name"])
def test_calibration_dataset_must_be_a_channel_or_a_bundled_set(dataset: str) -> None:
    with pytest.raises(ValidationError, match="calibration_dataset"):
        QuantizeHyperparameters(algorithm="gptq", scheme="W4A16", calibration_dataset=dataset)


def test_bundled_calibration_set_is_seeded_and_sized(tmp_path: Path) -> None:
    paths = JobPaths(tmp_path, tmp_path / "out", tmp_path / "data", tmp_path / "failure")
    hp = QuantizeHyperparameters(algorithm="gptq", scheme="W4A16", num_samples=20, seed=3)
    first = quantize.calibration_records(hp, paths)
    again = quantize.calibration_records(hp, paths)
    other = quantize.calibration_records(hp.model_copy(update={"seed": 4}), paths)
    assert len(first) == 20
    assert first == again
    assert first != other
    assert all(isinstance(r, list) and r[0]["role"] == "system" for r in first)


def test_channel_records_accept_messages_and_text_and_name_a_bad_line(tmp_path: Path) -> None:
    channel = tmp_path / "calibration"
    channel.mkdir()
    lines = [
        {"messages": [{"role": "user", "content": "hi"}]},
        {"text": "plain text sample"},
    ]
    (channel / "a.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    (channel / "b.json").write_text(json.dumps([{"text": "from a json array"}]))
    records = list(quantize.read_channel_records(channel))
    assert records == [
        [{"role": "user", "content": "hi"}],
        "plain text sample",
        "from a json array",
    ]
    (channel / "c.jsonl").write_text(json.dumps({"prompt": "no"}) + "\n")
    with pytest.raises(ValueError, match=r"c\.jsonl line 1"):
        list(quantize.read_channel_records(channel))


def test_missing_calibration_channel_names_the_channel_and_what_exists(tmp_path: Path) -> None:
    (tmp_path / "data" / "model").mkdir(parents=True)
    paths = JobPaths.from_environ({"SM_INPUT_DATA_DIR": str(tmp_path / "data")})
    hp = QuantizeHyperparameters(
        algorithm="gptq", scheme="W4A16", calibration_dataset="channel:calibration"
    )
    with pytest.raises(FileNotFoundError, match=r"channel 'calibration'.*have: model"):
        quantize.calibration_records(hp, paths)


def _job_environ(root: Path, hyperparameters: dict[str, str]) -> dict[str, str]:
    config = root / "input" / "config"
    config.mkdir(parents=True)
    (config / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    (root / "input" / "data" / "model").mkdir(parents=True)
    (root / "output").mkdir()
    return {
        "SM_INPUT_CONFIG_DIR": str(config),
        "SM_INPUT_DATA_DIR": str(root / "input" / "data"),
        "SM_OUTPUT_DIR": str(root / "output"),
        "SM_MODEL_DIR": str(root / "model"),
    }


def test_unsupported_pair_exits_2_and_reports_the_reason_to_sagemaker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    environ = _job_environ(tmp_path, {"algorithm": '"awq"', "scheme": '"W8A8"'})
    assert quantize.main(environ) == quantize.EXIT_BAD_HYPERPARAMETERS
    failure = (tmp_path / "output" / "failure").read_text()
    assert "algorithm='awq' and scheme='W8A8' are not a supported pair" in failure
    assert "smoothquant: W8A8" in failure
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["stage"] == "failed"


def test_model_channel_without_a_checkpoint_exits_1_naming_the_channel(tmp_path: Path) -> None:
    environ = _job_environ(tmp_path, {"algorithm": '"rtn"', "scheme": '"W8A16"'})
    assert quantize.main(environ) == quantize.EXIT_QUANTIZATION_FAILED
    failure = (tmp_path / "output" / "failure").read_text()
    assert "has no config.json" in failure
    assert "'model' input channel" in failure


def test_text_field_names_the_column_of_text_records(tmp_path: Path) -> None:
    channel = tmp_path / "calibration"
    channel.mkdir()
    (channel / "a.jsonl").write_text(json.dumps({"prompt": "a question"}) + "\n")
    assert list(quantize.read_channel_records(channel, text_field="prompt")) == ["a question"]


@pytest.mark.quantize
def test_hub_dataset_is_streamed_sampled_with_the_seed(tmp_path: Path) -> None:
    pytest.importorskip("datasets", reason="needs the quantize extra (datasets)")
    # A local folder is a valid dataset id for `datasets.load_dataset`, so the hub
    # branch runs for real without the network.
    hub = tmp_path / "hub"
    hub.mkdir()
    rows = [
        {"messages": [{"role": "user", "content": f"q{i}"}], "prompt": f"q{i}"} for i in range(40)
    ]
    (hub / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    hp = QuantizeHyperparameters(
        algorithm="gptq", scheme="W4A16", calibration_dataset=f"hf:{hub}", num_samples=5, seed=1
    )
    paths = JobPaths(tmp_path, tmp_path / "out", tmp_path / "data", tmp_path / "failure")
    records = quantize.calibration_records(hp, paths)
    assert len(records) == 5
    assert records == quantize.calibration_records(hp, paths)
    # Drawn from the first num_samples x HUB_OVERSAMPLE rows of the split.
    contents = {r[0]["content"] for r in records if isinstance(r, list)}
    assert len(contents) == 5
    assert all(int(c[1:]) < 5 * quantize.HUB_OVERSAMPLE for c in contents)


def test_symmetric_defaults_to_zero_points_for_awq_only() -> None:
    assert QuantizeHyperparameters(algorithm="awq", scheme="W4A16").symmetric is False
    assert QuantizeHyperparameters(algorithm="gptq", scheme="W4A16").symmetric is True
    assert QuantizeHyperparameters(algorithm="awq", scheme="W4A16", symmetric=True).symmetric

"""Request bodies, datasets, and the CLI's option parsing."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from endpoint_optimizer.bench.cli import parse_concurrency, parse_slo
from endpoint_optimizer.bench.models import BenchConfig, DatasetItem, RequestFormat
from endpoint_optimizer.bench.workload import DatasetError, load_dataset, request_body


def test_lmi_body_asks_for_the_output_length_and_details() -> None:
    body = json.loads(request_body(BenchConfig(input_tokens=32, output_tokens=7), 3))
    assert body["parameters"] == {"max_new_tokens": 7, "details": True}
    assert body["stream"] is True
    assert len(body["inputs"].split()) == 29  # marker + words, near the input length


def test_prompts_are_unique_per_request_so_prefix_caches_do_not_hit() -> None:
    config = BenchConfig(input_tokens=16)
    assert request_body(config, 0) != request_body(config, 1)
    assert request_body(config, 1) == request_body(config, 1)


def test_openai_body_asks_for_usage() -> None:
    config = BenchConfig(request_format=RequestFormat.OPENAI, output_tokens=5)
    body = json.loads(request_body(config, 0))
    assert body["max_tokens"] == 5 and body["stream_options"]["include_usage"] is True


def test_dataset_items_cycle_and_raw_bodies_pass_through() -> None:
    config = BenchConfig(
        dataset=[
            DatasetItem(prompt="hi", output_tokens=3),
            DatasetItem(body={"inputs": "raw", "custom": 1}),
        ]
    )
    assert json.loads(request_body(config, 2))["parameters"]["max_new_tokens"] == 3
    assert json.loads(request_body(config, 1)) == {"inputs": "raw", "custom": 1}
    assert "dataset" not in config.dump()  # prompts stay out of the report


def test_dataset_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "a"}\n{"prompt": "b", "messages": []}\n')
    with pytest.raises(DatasetError, match=r"d\.jsonl:2"):
        load_dataset(path)
    path.write_text('{"prompt": "a", "outputTokens": 4}\n\n')
    assert load_dataset(path)[0].output_tokens == 4


def test_slo_parsing() -> None:
    slo = parse_slo("ttft=200ms,itl=0.05,e2e=10s")
    assert (slo.ttft_s, slo.tpot_s, slo.e2e_s) == (0.2, 0.05, 10.0)
    with pytest.raises(click.BadParameter, match="ttft"):
        parse_slo("latency=3")


def test_concurrency_parsing() -> None:
    assert parse_concurrency("1,16, 64") == [1, 16, 64]
    with pytest.raises(click.BadParameter):
        parse_concurrency("0,4")

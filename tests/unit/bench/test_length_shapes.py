"""Request lengths drawn from a distribution: seeded, per request, mean and spread as asked."""

from __future__ import annotations

import json
import statistics

from endpoint_optimizer.api import parse_spec
from endpoint_optimizer.aws.perform import bench_config
from endpoint_optimizer.bench.models import BenchConfig, RequestFormat
from endpoint_optimizer.bench.workload import request_body, request_lengths
from tests.e2e.conftest import spec as e2e_spec


def test_without_a_spread_every_request_has_the_mean_lengths() -> None:
    config = BenchConfig(input_tokens=64, output_tokens=32)
    assert {request_lengths(config, i) for i in range(50)} == {(64, 32)}


def test_drawn_lengths_have_the_asked_mean_and_spread_and_stay_positive() -> None:
    config = BenchConfig(
        input_tokens=550, input_tokens_sd=150, output_tokens=150, output_tokens_sd=10
    )
    inputs, outputs = zip(*(request_lengths(config, i) for i in range(4000)), strict=True)
    assert abs(statistics.mean(inputs) - 550) < 10
    assert abs(statistics.stdev(inputs) - 150) < 10
    assert abs(statistics.mean(outputs) - 150) < 1
    assert abs(statistics.stdev(outputs) - 10) < 1
    wide = BenchConfig(output_tokens=3, output_tokens_sd=20)
    assert min(request_lengths(wide, i)[1] for i in range(500)) == 1


def test_the_same_seed_gives_the_same_lengths_whatever_order_requests_are_built() -> None:
    config = BenchConfig(output_tokens=100, output_tokens_sd=30, seed=7)
    forward = [request_lengths(config, i) for i in range(100)]
    backward = [request_lengths(config, i) for i in reversed(range(100))][::-1]
    assert forward == backward
    other = config.model_copy(update={"seed": 8})
    assert [request_lengths(other, i) for i in range(100)] != forward


def test_the_body_asks_for_the_drawn_output_length_in_either_format() -> None:
    config = BenchConfig(output_tokens=100, output_tokens_sd=30, input_tokens=40, seed=3)
    expected = [request_lengths(config, i)[1] for i in range(20)]
    lmi = [json.loads(request_body(config, i))["parameters"]["max_new_tokens"] for i in range(20)]
    chat = config.model_copy(update={"request_format": RequestFormat.OPENAI})
    openai = [json.loads(request_body(chat, i))["max_tokens"] for i in range(20)]
    assert lmi == openai == expected
    assert len(set(expected)) > 5


def test_the_specs_spread_reaches_the_request_bodies_and_none_keeps_the_means() -> None:
    shaped = {"inputTokens": 550, "inputTokensSd": 150, "outputTokens": 150, "outputTokensSd": 10}
    config = bench_config(parse_spec(e2e_spec(benchmark={"concurrency": [4], **shaped})))
    assert (config.input_tokens_sd, config.output_tokens_sd) == (150, 10)
    asked = [
        json.loads(request_body(config, i))["parameters"]["max_new_tokens"] for i in range(400)
    ]
    assert abs(statistics.mean(asked) - 150) < 2 and 7 < statistics.stdev(asked) < 13
    words = [len(json.loads(request_body(config, i))["inputs"].split()) for i in range(400)]
    assert 100 < statistics.stdev(words) < 200  # ~150 tokens, a word each
    plain = bench_config(parse_spec(e2e_spec(benchmark={"concurrency": [4], "outputTokens": 9})))
    assert {
        json.loads(request_body(plain, i))["parameters"]["max_new_tokens"] for i in range(50)
    } == {9}

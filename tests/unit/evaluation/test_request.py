"""Eval and benchmark request bodies in each format the endpoint may serve."""

from __future__ import annotations

import json

from endpoint_optimizer.api import RequestFormat, parse_spec
from endpoint_optimizer.aws.evaluate import answer_text
from endpoint_optimizer.aws.perform import bench_config
from endpoint_optimizer.bench.workload import request_body
from endpoint_optimizer.evaluation.request import eval_body
from tests.unit.pipeline.test_decide import spec


def test_each_format_asks_greedy_answers_with_the_seed() -> None:
    lmi = eval_body("2+2?", 8, RequestFormat.LMI, seed=7)
    assert lmi == {
        "inputs": "2+2?",
        "parameters": {"max_new_tokens": 8, "do_sample": False, "seed": 7},
    }
    chat = eval_body("2+2?", 8, RequestFormat.CHAT, seed=7)
    assert chat["messages"] == [{"role": "user", "content": "2+2?"}]
    assert (chat["max_tokens"], chat["temperature"], chat["seed"]) == (8, 0, 7)
    completions = eval_body("2+2?", 8, RequestFormat.COMPLETIONS, seed=7)
    assert completions == {"prompt": "2+2?", "max_tokens": 8, "temperature": 0, "seed": 7}


def test_answers_are_read_from_each_formats_response() -> None:
    assert answer_text({"generated_text": "4"}) == "4"
    assert answer_text({"choices": [{"message": {"role": "assistant", "content": "4"}}]}) == "4"
    assert answer_text({"choices": [{"index": 0, "text": "4"}]}) == "4"


def test_the_eval_format_defaults_to_the_benchmarks_and_reaches_the_benchmark_body() -> None:
    evaluation = {"dataset": {"configMapRef": {"name": "evals", "key": "items.jsonl"}}}
    chat = parse_spec(spec(benchmark={"requestFormat": "chat"}, evaluation=evaluation))
    assert chat.eval_request_format() is RequestFormat.CHAT
    assert "messages" in json.loads(request_body(bench_config(chat), 0))
    mixed = parse_spec(
        spec(
            benchmark={"requestFormat": "completions"},
            evaluation=evaluation | {"requestFormat": "lmi"},
        )
    )
    assert mixed.eval_request_format() is RequestFormat.LMI
    body = json.loads(request_body(bench_config(mixed), 0))
    assert set(body) == {"prompt", "max_tokens", "stream", "stream_options"}
    assert parse_spec(spec()).eval_request_format() is RequestFormat.LMI

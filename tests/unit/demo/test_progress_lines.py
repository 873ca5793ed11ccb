"""The demo's table says what a running measurement is doing, from status.measurement."""

from __future__ import annotations

from endpoint_optimizer.demo.progress import measuring


def test_a_benchmark_shows_its_level_and_requests() -> None:
    status = {
        "message": "measuring the baseline",
        "measurement": {
            "action": "Compare",
            "stage": "benchmark",
            "concurrency": 8,
            "level": 2,
            "levels": 3,
            "round": 2,
            "requestsDone": 40,
            "requestsPlanned": 128,
            "elapsed": "1m20s",
        },
    }
    assert measuring(status) == (
        "measuring baseline vs candidate: c=8 (level 2/3, round 2) 40/128 requests, 1m20s"
    )


def test_an_eval_shows_answers_and_nothing_shows_when_nothing_runs() -> None:
    status = {
        "measurement": {
            "action": "MeasureBaseline",
            "stage": "evaluation",
            "requestsDone": 3,
            "requestsPlanned": 50,
            "elapsed": "4s",
        }
    }
    assert measuring(status) == "measuring baseline: eval 3/50 answers, 4s"
    assert measuring({"phase": "Analyzing"}) is None

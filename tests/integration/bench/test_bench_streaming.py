"""The benchmark against a real HTTP event-stream server, through real boto3."""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from endpoint_optimizer.bench import BenchConfig, BenchTarget, RequestFormat, Slo, run_benchmark
from endpoint_optimizer.bench.cli import bench_command

from .reads import tokens_after_first_read
from .streaming_server import TTFT_S, StreamingServer, use_credentials


@pytest.fixture(autouse=True)
def fake_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    use_credentials(monkeypatch, "testing")


@pytest.fixture(scope="module")
def server() -> Iterator[StreamingServer]:
    running = StreamingServer().start()
    yield running
    running.stop()


def target(server: StreamingServer, name: str, variant: str | None = None) -> BenchTarget:
    return BenchTarget(endpoint_name=name, endpoint_url=server.url, variant=variant)


async def test_closed_loop_measures_ttft_and_itl_no_earlier_than_the_server_sent(
    server: StreamingServer,
) -> None:
    config = BenchConfig(concurrency=[1, 4], requests=8, output_tokens=6, run_id="closed")
    report = await run_benchmark(target(server, "lmi"), config)
    assert [level.concurrency for level in report.levels] == [1, 4]
    for level in report.levels:
        assert len(level.samples) == 8
        assert level.summary.error_rate == 0
        assert level.summary.ttft_s.n == 8
        # Tokens after the first read (8 x 5 when the client kept up with every chunk).
        assert level.summary.itl_s.n == sum(tokens_after_first_read(s) for s in level.samples)
        assert level.summary.itl_s.n <= 8 * 5
        for sample in level.samples:
            truth = server.served[sample.inference_id]
            assert sample.output_tokens == 6
            assert sample.tokens_source == "usage"
            # No chunk can arrive before the server sent it (one host, one monotonic clock).
            arrivals = [sample.sent_at + offset for offset in sample.chunk_offsets_s]
            assert all(a >= s for a, s in zip(arrivals, truth.sent_at, strict=True))
            assert sample.ttft_s is not None
            assert sample.ttft_s >= truth.sent_at[0] - truth.received_at
            assert sample.ttft_s >= TTFT_S
            # Per-token ITLs add up to the decode time.
            assert sum(sample.itl_s) == pytest.approx(sample.chunk_offsets_s[-1] - sample.ttft_s)
        assert level.window.active_s > 0
        assert level.summary.output_tokens_per_s > 0


async def test_a_json_line_split_over_payload_parts_is_reassembled(server: StreamingServer) -> None:
    config = BenchConfig(concurrency=[2], requests=4, output_tokens=5, run_id="split")
    (level,) = (await run_benchmark(target(server, "split"), config)).levels
    assert level.summary.error_rate == 0
    assert all(s.output_tokens == 5 and len(s.chunk_offsets_s) == 5 for s in level.samples)


@pytest.mark.parametrize("kind", ["ModelStreamError", "InternalStreamFailure"])
async def test_mid_stream_errors_count_as_failed_requests_with_their_kind(
    server: StreamingServer, kind: str
) -> None:
    name = "stream-error" if kind == "ModelStreamError" else "internal-failure"
    config = BenchConfig(concurrency=[2], requests=3, output_tokens=8, run_id=name)
    (level,) = (await run_benchmark(target(server, name), config)).levels
    assert level.summary.error_rate == 1.0
    assert level.summary.errors == {kind: 3}
    assert level.summary.ttft_s.n == 0  # failed requests stay out of the latency samples


async def test_an_error_before_the_stream_is_a_failed_request(server: StreamingServer) -> None:
    config = BenchConfig(concurrency=[1], requests=2, run_id="model-error")
    (level,) = (await run_benchmark(target(server, "model-error"), config)).levels
    assert level.summary.errors == {"ModelError": 2}


async def test_target_variant_pins_every_request(server: StreamingServer) -> None:
    config = BenchConfig(concurrency=[2], requests=4, output_tokens=3, run_id="pinned")
    (level,) = (await run_benchmark(target(server, "lmi", variant="candidate"), config)).levels
    assert {server.served[s.inference_id].variant for s in level.samples} == {"candidate"}
    assert {s.invoked_variant for s in level.samples} == {"candidate"}


async def test_warmup_requests_are_sent_but_not_reported(server: StreamingServer) -> None:
    config = BenchConfig(concurrency=[2], requests=4, warmup=3, output_tokens=3, run_id="warm")
    (level,) = (await run_benchmark(target(server, "lmi"), config)).levels
    assert sorted(s.index for s in level.samples) == [3, 4, 5, 6]
    assert {f"warm-c2-{i}" for i in range(7)} <= set(server.served)
    assert level.summary.ttft_s.n == 4
    first_measured = min(server.served[f"warm-c2-{i}"].received_at for i in range(3, 7))
    assert level.window.start_at <= first_measured


async def test_ramp_up_staggers_the_first_sends(server: StreamingServer) -> None:
    # Requests (20 ms + 60 x 4 ms) outlast the ramp, so each slot sends exactly one.
    config = BenchConfig(
        concurrency=[4], requests=4, ramp_up_s=0.2, output_tokens=60, run_id="ramp"
    )
    (level,) = (await run_benchmark(target(server, "lmi"), config)).levels
    scheduled = sorted(s.scheduled_at for s in level.samples)
    gaps = [b - a for a, b in itertools.pairwise(scheduled)]
    assert gaps == pytest.approx([0.05, 0.05, 0.05], abs=1e-6)
    assert all(s.sent_at >= s.scheduled_at for s in level.samples)  # none before its turn


async def test_multi_token_chunks_give_per_token_itl_and_acceptance_estimates(
    server: StreamingServer,
) -> None:
    config = BenchConfig(
        concurrency=[2],
        requests=4,
        output_tokens=9,
        request_format=RequestFormat.OPENAI,
        num_speculative_tokens=3,
        run_id="spec",
    )
    (level,) = (await run_benchmark(target(server, "openai-3"), config)).levels
    assert level.summary.error_rate == 0
    for sample in level.samples:
        assert sample.chunk_tokens == [3, 3, 3]
        assert sample.chunk_tokens_exact
        assert len(sample.chunk_gaps_s) == 2
        assert len(sample.itl_s) == tokens_after_first_read(sample)
        if len(sample.itl_s) == 6:  # the client read the first two steps apart
            assert sample.itl_s[0] == pytest.approx(sample.chunk_gaps_s[0] / 3)
    black_box = level.acceptance.black_box
    assert black_box.mean_tokens_per_chunk == 3.0
    assert black_box.acceptance_rate == pytest.approx(2 / 3)
    server_side = level.acceptance.server
    assert server_side is not None
    assert server_side.acceptance_rate == pytest.approx(2 / 3)
    assert server_side.mean_acceptance_length == pytest.approx(3.0)


async def test_poisson_arrivals_are_seeded_and_queueing_is_not_ttft(
    server: StreamingServer,
) -> None:
    def config(run_id: str) -> BenchConfig:
        return BenchConfig(
            concurrency=[1], requests=6, output_tokens=2, rate=200.0, seed=7, run_id=run_id
        )

    first = (await run_benchmark(target(server, "lmi"), config("p1"))).levels[0]
    second = (await run_benchmark(target(server, "lmi"), config("p2"))).levels[0]

    def offsets(level_samples: list[float]) -> list[float]:
        return [round(x - level_samples[0], 9) for x in level_samples]

    assert offsets([s.scheduled_at for s in first.samples]) == offsets(
        [s.scheduled_at for s in second.samples]
    )
    # At 200 req/s against ~30 ms requests and a ceiling of 1, requests queue on the client:
    assert max(s.client_queue_s for s in first.samples) > 0
    for sample in first.samples:
        # Equal where one read brought the whole stream: the kernel's stamp is both.
        assert sample.ttft_s is not None and sample.ttft_s <= sample.e2e_s


async def test_goodput_counts_requests_that_meet_the_slo(server: StreamingServer) -> None:
    tight = BenchConfig(
        concurrency=[1], requests=3, output_tokens=3, slo=Slo(ttft_s=0.001), run_id="slo1"
    )
    loose = tight.model_copy(update={"slo": Slo(ttft_s=30.0), "run_id": "slo2"})
    assert (await run_benchmark(target(server, "lmi"), tight)).levels[0].summary.good_fraction == 0
    assert (await run_benchmark(target(server, "lmi"), loose)).levels[0].summary.good_fraction == 1


def test_cli_prints_a_summary_and_writes_json(server: StreamingServer, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        bench_command,
        [
            "--endpoint", "lmi", "--endpoint-url", server.url, "--concurrency", "1,2",
            "--requests", "3", "--input-tokens", "16", "--output-tokens", "4",
            "--slo", "ttft=10s,itl=1s", "--json", str(out),
        ],
    )  # fmt: skip
    # 3: the saturation guard marked a level invalid (a loaded CI machine can do that);
    # the report is still written and says why.
    assert result.exit_code in (0, 3), result.output
    assert (result.exit_code == 3) == ("INVALID" in result.output)
    assert "TTFT" in result.output and "concurrency 2" in result.output
    report = json.loads(out.read_text())
    assert [level["concurrency"] for level in report["levels"]] == [1, 2]
    level = report["levels"][0]
    assert level["summary"]["ttftS"]["n"] == 3
    assert len(level["samples"]) == 3
    # One ITL entry per output token after the first socket read (bench/timeline.py): on
    # a loaded machine the first two tokens can arrive in one read (CI saw 2 entries).
    sample = level["samples"][0]
    offsets, tokens = sample["chunkOffsetsS"], sample["chunkTokens"]
    first_read = sum(t for at, t in zip(offsets, tokens, strict=True) if at == offsets[0])
    assert sum(tokens) == 4 and len(sample["itlS"]) == 4 - first_read >= 1
    assert level["summary"]["goodFraction"] == 1.0


def test_cli_runs_a_dataset_at_a_poisson_rate(server: StreamingServer, tmp_path: Path) -> None:
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text(
        '{"prompt": "summarize this", "outputTokens": 3}\n'
        '{"messages": [{"role": "user", "content": "hi"}], "outputTokens": 6}\n'
    )
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        bench_command,
        [
            "--endpoint", "openai-2", "--endpoint-url", server.url, "--format", "openai",
            "--dataset", str(dataset), "--rate", "50", "--concurrency", "2",
            "--requests", "4", "--speculative-tokens", "2", "--json", str(out),
            "--workers", "2",
        ],
    )  # fmt: skip
    assert result.exit_code in (0, 3), result.output
    (level,) = json.loads(out.read_text())["levels"]
    assert level["rate"] == 50
    assert level["window"]["workers"] == 2  # the dataset travelled to both processes
    assert sorted(s["outputTokens"] for s in level["samples"]) == [3, 3, 6, 6]
    assert level["acceptance"]["blackBox"]["numSpeculativeTokens"] == 2
    assert "prompt" not in out.read_text()  # prompts never reach the report


async def test_overlapping_runs_restore_the_switch_interval(server: StreamingServer) -> None:
    before = sys.getswitchinterval()
    config = BenchConfig(concurrency=[2], requests=3, output_tokens=3, switch_interval_s=0.0005)
    first = run_benchmark(target(server, "lmi"), config.model_copy(update={"run_id": "o1"}))
    second = run_benchmark(
        target(server, "lmi", "candidate"), config.model_copy(update={"run_id": "o2"})
    )
    reports = await asyncio.gather(first, second)
    assert all(r.levels[0].summary.error_rate == 0 for r in reports)
    assert sys.getswitchinterval() == before


async def test_a_level_sharded_over_processes_reports_like_one(server: StreamingServer) -> None:
    """Two spawned client processes share one closed loop: every index once, warm-up
    dropped wherever it ran, one window, and the guard fed by both."""
    config = BenchConfig(
        concurrency=[4], requests=8, warmup=2, output_tokens=3, workers=2, run_id="shard"
    )
    progress: list[int] = []
    report = await run_benchmark(
        target(server, "lmi"), config, progress=lambda c, done, total: progress.append(done)
    )
    (level,) = report.levels
    assert level.window.workers == 2
    assert [s.index for s in level.samples] == list(range(2, 10))
    assert {f"shard-c4-{i}" for i in range(10)} <= set(server.served)
    assert all(s.ok and s.output_tokens == 3 for s in level.samples)
    for sample in level.samples:
        served = server.served[sample.inference_id]
        assert sample.sent_at <= served.received_at  # one clock across processes
        assert sample.ttft_s is not None and sample.ttft_s >= TTFT_S
    assert level.validity.wake_lag_s.n > 0 and level.validity.send_lag_s.n == 8
    assert progress == list(range(1, 9))
    assert level.window.client_cpu_s > 0


async def test_a_given_runtime_client_cannot_be_sharded(server: StreamingServer) -> None:
    from endpoint_optimizer.bench.client import make_runtime_client

    client = make_runtime_client(target(server, "lmi"), 2, 10.0)
    config = BenchConfig(concurrency=[2], requests=2, workers=2)
    with pytest.raises(ValueError, match=r"BenchConfig\.workers"):
        await run_benchmark(target(server, "lmi"), config, runtime_client=client)

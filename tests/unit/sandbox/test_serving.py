"""The pure serving model: calibration against the H200 measurements and anchor figures."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

import pytest

from endpoint_optimizer.sandbox import evalset
from endpoint_optimizer.sandbox.serving import (
    RequestTrace,
    Speculative,
    VariantProfile,
    eval_outcome,
    model_size_from_uri,
    profile_from_environment,
    simulate,
)

H200_8B = VariantProfile(instance_type="ml.p5e.48xlarge", tensor_parallel_degree=1)


@pytest.mark.parametrize(("batch", "measured_ms"), [(1, 5.232), (16, 6.016), (64, 7.848)])
def test_decode_step_matches_the_h200_measurement(batch: int, measured_ms: float) -> None:
    assert H200_8B.decode_step_ms(batch, 1024) == pytest.approx(measured_ms, rel=0.05)


def test_fp8_gain_shrinks_with_batch_and_w4a16_loses_at_high_batch() -> None:
    fp8, w4 = replace(H200_8B, quantization="fp8"), replace(H200_8B, quantization="w4a16")
    speedup = [H200_8B.decode_step_ms(b, 1024) / fp8.decode_step_ms(b, 1024) for b in (1, 128)]
    assert speedup[0] == pytest.approx(1.37, abs=0.05)
    assert speedup[1] < speedup[0]
    assert H200_8B.decode_step_ms(1, 1024) / w4.decode_step_ms(1, 1024) > 1.6
    assert H200_8B.decode_step_ms(128, 1024) / w4.decode_step_ms(128, 1024) < 1.0


def test_prefill_matches_h200_and_slower_gpus_scale_down() -> None:
    assert H200_8B.prefill_ms(2048) == pytest.approx(54.7, rel=0.05)
    l4 = replace(H200_8B, instance_type="ml.g6.2xlarge")
    assert l4.decode_step_ms(1, 1024) > 10 * H200_8B.decode_step_ms(1, 1024)


def test_profile_from_environment_reads_lmi_options() -> None:
    profile = profile_from_environment(
        "ml.g6e.12xlarge",
        "s3://bucket/meta-llama-3.1-70b-instruct/",
        {
            "OPTION_QUANTIZE": "awq",
            "OPTION_TENSOR_PARALLEL_DEGREE": "4",
            "OPTION_MAX_ROLLING_BATCH_SIZE": "32",
            "OPTION_SPECULATIVE_CONFIG": '{"method": "ngram", "num_speculative_tokens": 4}',
        },
    )
    assert profile.model_size_b == 70
    assert profile.quantization == "w4a16"
    assert profile.tensor_parallel_degree == 4
    assert profile.max_batch_size == 32
    assert profile.speculative == Speculative("ngram", 4)
    assert model_size_from_uri("jumpstart:meta-textgeneration-llama-3-1-8b") == 8
    assert model_size_from_uri("s3://x/unknown/") == 8


def test_memory_limits_batch_and_refuses_models_that_do_not_fit() -> None:
    small = profile_from_environment("ml.g5.2xlarge", "s3://m/llama-3.1-8b/", {})
    assert small.fits()
    assert small.batch_limit(8192) < small.batch_limit(1024)
    assert not profile_from_environment("ml.g5.2xlarge", "s3://m/llama-70b/", {}).fits()
    fp8 = replace(H200_8B, quantization="fp8")
    assert fp8.kv_capacity_tokens() > H200_8B.kv_capacity_tokens()


@pytest.mark.parametrize(
    ("raw", "kind", "share"), [("fp8_e4m3", "fp8", 2.0), ("nvfp4", "nvfp4", 16 / 4.5)]
)
def test_a_quantized_kv_cache_holds_more_tokens_and_reads_fewer_bytes(
    raw: str, kind: str, share: float
) -> None:
    plain = profile_from_environment("ml.g6e.2xlarge", "s3://m/llama-3.1-8b/", {})
    quantized = profile_from_environment(
        "ml.g6e.2xlarge", "s3://m/llama-3.1-8b/", {"OPTION_KV_CACHE_DTYPE": raw}
    )
    assert quantized.kv_cache_dtype == kind
    assert quantized.kv_capacity_tokens() == pytest.approx(
        plain.kv_capacity_tokens() * share, rel=1e-4
    )
    assert quantized.batch_limit(8192) > plain.batch_limit(8192)
    # The KV read grows with context; at long context the smaller cache is the faster one.
    assert quantized.decode_step_ms(64, 8000) < plain.decode_step_ms(64, 8000)
    assert quantized.decode_step_ms(1, 1) == pytest.approx(plain.decode_step_ms(1, 1), rel=1e-3)
    unknown = profile_from_environment(
        "ml.g6e.2xlarge", "s3://m/llama-3.1-8b/", {"OPTION_KV_CACHE_DTYPE": "int3"}
    )
    assert unknown.kv_cache_dtype == "auto"


def _itl(traces: list[RequestTrace]) -> float:
    return statistics.mean((t.t_end - t.t_first_token) / (t.output_tokens - 1) for t in traces)


def test_simulate_is_deterministic_per_seed_and_counts_tokens() -> None:
    first = simulate(H200_8B, concurrency=4, requests=8, input_tokens=256, output_tokens=32, seed=3)
    again = simulate(H200_8B, concurrency=4, requests=8, input_tokens=256, output_tokens=32, seed=3)
    assert [t.token_times for t in first] == [t.token_times for t in again]
    assert all(t.output_tokens == 32 and sum(t.chunk_tokens) == 32 for t in first)
    assert all(t.ttft > 0 and t.t_start >= t.t_arrival for t in first)


def test_queueing_beyond_the_batch_limit_raises_ttft() -> None:
    one_gpu = profile_from_environment("ml.g6e.2xlarge", "s3://m/llama-3.1-8b/", {})
    limited = replace(one_gpu, max_batch_size=2)
    free = simulate(one_gpu, concurrency=8, requests=16, input_tokens=128, output_tokens=16)
    queued = simulate(limited, concurrency=8, requests=16, input_tokens=128, output_tokens=16)
    assert statistics.mean(t.ttft for t in queued) > 2 * statistics.mean(t.ttft for t in free)
    assert any(t.t_start > t.t_arrival for t in queued)


def test_ngram_speculation_pays_on_grounded_low_load_and_hurts_chat_at_high_load() -> None:
    base = profile_from_environment("ml.g6e.2xlarge", "s3://m/llama-3.1-8b/", {})
    ngram = replace(base, speculative=Speculative("ngram", 5))

    def speedup(concurrency: int, overlap: float) -> float:
        kwargs = dict(requests=2 * concurrency, input_tokens=512, output_tokens=128, seed=1)
        plain = simulate(base, concurrency, overlap=overlap, **kwargs)  # type: ignore[arg-type]
        spec = simulate(ngram, concurrency, overlap=overlap, **kwargs)  # type: ignore[arg-type]
        assert all(t.accepted_tokens <= t.draft_tokens for t in spec)
        assert any(c > 1 for t in spec for c in t.chunk_tokens)  # several tokens per chunk
        return _itl(plain) / _itl(spec)

    assert 2.0 < speedup(1, 0.8) < 3.0  # prompt lookup on summarization: ~2.4x
    assert 1.0 < speedup(1, 0.2) < 1.6  # chat at low load: small gain
    assert speedup(64, 0.2) < 1.0  # chat at high load: slowdown


def test_eval_outcomes_are_paired_and_shaped_by_scheme() -> None:
    items = evalset.generate(seed=11, count=2000)
    base = VariantProfile()
    w4 = replace(base, quantization="w4a16")
    regressed = replace(base, quality_drop=0.1)

    def accuracy(profile: VariantProfile) -> float:
        hits = sum(
            eval_outcome(profile, 0, item.prompt, evalset.BASE_ACCURACY[item.kind]) == "correct"
            for item in items
        )
        return hits / len(items)

    assert [eval_outcome(base, 0, i.prompt, 0.9) for i in items[:50]] == [
        eval_outcome(base, 0, i.prompt, 0.9) for i in items[:50]
    ]
    assert accuracy(base) - accuracy(w4) == pytest.approx(0.012, abs=0.012)
    assert accuracy(base) - accuracy(regressed) == pytest.approx(0.1, abs=0.03)
    discordant = sum(
        (eval_outcome(base, 0, i.prompt, 0.9) == "correct")
        != (eval_outcome(w4, 0, i.prompt, 0.9) == "correct")
        for i in items
    )
    assert 0.005 < discordant / len(items) < 0.1


def test_shipped_eval_set_is_the_seeded_generator_output() -> None:
    shipped = evalset.load()
    assert shipped == evalset.generate()
    assert {item.kind for item in shipped} == {"arithmetic", "copy", "capital"}
    assert all(evalset.lookup(item.prompt) == item for item in shipped)


def test_spare_gpus_run_model_copies_that_share_the_load() -> None:
    copies = profile_from_environment(
        "ml.g6e.12xlarge", "s3://m/llama-3.1-8b/", {"OPTION_TENSOR_PARALLEL_DEGREE": "1"}
    )
    assert copies.replicas == 4
    assert profile_from_environment("ml.g6e.12xlarge", "s3://m/llama-3.1-8b/", {}).replicas == 1
    one_copy = replace(copies, instance_type="ml.g6e.2xlarge")
    spread = simulate(copies, 16, 32, 512, 16, seed=2)
    single = simulate(one_copy, 16, 32, 512, 16, seed=2)
    assert sorted(t.index for t in spread) == list(range(32))
    assert {t.client for t in spread} == set(range(16))
    assert statistics.mean(t.ttft for t in spread) < statistics.mean(t.ttft for t in single) / 2


def test_vllms_batch_schedule_stops_drafting_above_the_cutoff_and_recovers_the_plain_speed() -> (
    None
):
    """num_speculative_tokens_per_batch_size [[1, 8, 5], [9, 9, 0]]: K=5 while a step
    schedules up to 8 requests, none above (a batch past the last range keeps its K)."""
    config = {"method": "ngram", "num_speculative_tokens": 5}
    cutoff = {**config, "num_speculative_tokens_per_batch_size": [[1, 8, 5], [9, 9, 0]]}

    def profile(spec_config: dict[str, object] | None) -> VariantProfile:
        env = {"OPTION_SPECULATIVE_CONFIG": json.dumps(spec_config)} if spec_config else {}
        return profile_from_environment("ml.g6e.2xlarge", "s3://m/llama-3.1-8b/", env)

    plain, ngram, switched = profile(None), profile(config), profile(cutoff)
    assert switched.speculative is not None
    assert [switched.draft_tokens(b) for b in (1, 8, 9, 64)] == [5, 5, 0, 0]

    def run(p: VariantProfile, concurrency: int) -> list[RequestTrace]:
        return simulate(
            p,
            concurrency,
            requests=2 * concurrency,
            input_tokens=512,
            output_tokens=128,
            seed=1,
            overlap=0.2,
        )

    # Low load: the schedule changes nothing (the same draws, the same times).
    assert [t.e2e for t in run(switched, 1)] == [t.e2e for t in run(ngram, 1)]
    # High load: no drafts once the batch passes 8, and the plain engine's speed back.
    high = run(switched, 64)
    assert sum(t.draft_tokens for t in high) < sum(t.draft_tokens for t in run(ngram, 64)) / 4
    assert _itl(high) < _itl(run(ngram, 64))
    assert _itl(high) == pytest.approx(_itl(run(plain, 64)), rel=0.1)


def test_a_schedule_vllm_refuses_at_startup_is_ignored_by_the_sandbox() -> None:
    bad = {
        "method": "ngram",
        "num_speculative_tokens": 5,
        "num_speculative_tokens_per_batch_size": [[2, 8, 5]],
    }
    env = {"OPTION_SPECULATIVE_CONFIG": json.dumps(bad)}
    profile = profile_from_environment("ml.g6e.2xlarge", "s3://m/llama-3.1-8b/", env)
    assert profile.draft_tokens(64) == 5

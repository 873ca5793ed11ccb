"""Judge benchmark: how often each judge rolls back a healthy candidate, how fast it
catches a bad one, on identical traffic for our judges and a Flagger-style rule.

    .venv/bin/python benchmarks/bench_judges.py                # 200 rollouts per scenario
    .venv/bin/python benchmarks/bench_judges.py --rollouts 40  # quick look

Traffic comes from the sandbox's serving model (endpoint_optimizer.sandbox.serving).
`simulate` is deterministic for a plain (non-speculative) variant and a fixed prompt
shape, so per-request spread comes from the workload mix: each request draws its
prompt length (lognormal around 512 tokens) and the load it meets (1-16 concurrent
requests), and its TTFT is drawn from `simulate` runs at exactly that shape and load,
tabulated once per variant profile. A regression is `with_regression(latency_factor)`.
Results go to a JSON file; docs/analysis.md §5 quotes them.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import numpy.typing as npt

from endpoint_optimizer.analysis.acceptance import acceptance_check
from endpoint_optimizer.analysis.benchmark import BenchmarkPolicy, LevelSamples, judge_benchmark
from endpoint_optimizer.analysis.live import (
    LiveObservation,
    LivePolicy,
    VariantInterval,
    judge_interval,
)
from endpoint_optimizer.api.checks import Verdict
from endpoint_optimizer.api.live import LatencyNoise, LiveDecision, LiveState
from endpoint_optimizer.evaluation.gate import eval_check, refusal_check
from endpoint_optimizer.sandbox.serving import (
    Speculative,
    VariantProfile,
    eval_outcome,
    simulate,
    with_regression,
)

FloatArray = npt.NDArray[np.float64]
START = datetime(2026, 1, 1, tzinfo=UTC)
CONCURRENCY = np.arange(1, 17)
INPUT_TOKENS = np.unique(np.geomspace(64, 4096, 16).round().astype(int))
OUTPUT_TOKENS = 128


def calibrate_latency_noise(
    invocations: Sequence[int],
    averages: Sequence[float | None] | None = None,
    p99s: Sequence[float | None] | None = None,
    confidence: float = 0.95,
) -> LatencyNoise:
    """The baseline's own interval-to-interval noise, from its CloudWatch history.

    Successive differences cancel slow drift (traffic that grows over the hour):
    E[(x_t - x_{t-1})^2] = c (1/n_t + 1/n_{t-1}) for x = log statistic. The estimate of c
    is raised to its one-sided `confidence` upper bound (Wilson-Hilferty chi-square), so
    a short history errs towards a slower test, not towards false rollbacks. Intervals
    without invocations or a value are skipped; fewer than 10 usable pairs give None.
    """
    return LatencyNoise(
        average=_noise(invocations, averages, confidence),
        p99=_noise(invocations, p99s, confidence),
        intervals=len(invocations),
    )


def _noise(
    invocations: Sequence[int], values: Sequence[float | None] | None, confidence: float
) -> float | None:
    if values is None:
        return None
    if len(values) != len(invocations):
        raise ValueError(
            f"calibration: {len(values)} latency values for {len(invocations)} intervals"
        )
    ratios = []
    previous: tuple[int, float] | None = None
    for count, value in zip(invocations, values, strict=True):
        if count <= 0 or value is None or value <= 0:
            previous = None
            continue
        current = (count, math.log(value))
        if previous is not None:
            spread = 1.0 / previous[0] + 1.0 / current[0]
            ratios.append((current[1] - previous[1]) ** 2 / spread)
        previous = current
    pairs = len(ratios)
    if pairs < 10:
        return None
    estimate = sum(ratios) / pairs
    # Successive differences overlap, so about pairs/2 independent degrees of freedom.
    dof = max(1.0, pairs / 2.0)
    z = statistics.NormalDist().inv_cdf(1.0 - confidence)
    lower_quantile = dof * (1.0 - 2.0 / (9.0 * dof) + z * math.sqrt(2.0 / (9.0 * dof))) ** 3
    return max(estimate * dof / max(lower_quantile, 1e-9), 1e-9)


@dataclass(frozen=True)
class TtftTable:
    """TTFT pools (seconds) per (load, prompt length) cell, from `simulate`."""

    values: FloatArray  # cells x pool slots, NaN-padded
    sizes: npt.NDArray[np.int64]

    @classmethod
    def build(cls, profile: VariantProfile) -> TtftTable:
        pools = []
        for concurrency in CONCURRENCY:
            for tokens in INPUT_TOKENS:
                traces = simulate(
                    profile,
                    int(concurrency),
                    3 * int(concurrency),
                    int(tokens),
                    OUTPUT_TOKENS,
                    seed=0,
                )
                pools.append([t.ttft / 1000.0 for t in traces])
        width = max(len(p) for p in pools)
        values = np.full((len(pools), width), np.nan)
        for row, pool in enumerate(pools):
            values[row, : len(pool)] = pool
        return cls(values, np.array([len(p) for p in pools], dtype=np.int64))

    def draw(
        self, rng: np.random.Generator, n: int, prompt_sigma: float = 0.7
    ) -> tuple[FloatArray, npt.NDArray[np.int64]]:
        """TTFT (s) and prompt tokens of `n` requests from the workload mix."""
        load = rng.binomial(15, 0.45, n)  # concurrent requests met, minus one
        length = np.exp(rng.normal(np.log(512), prompt_sigma, n))
        column = np.abs(np.log(INPUT_TOKENS)[None, :] - np.log(length)[:, None]).argmin(axis=1)
        cell = load * INPUT_TOKENS.size + column
        slot = (rng.random(n) * self.sizes[cell]).astype(np.int64)
        return self.values[cell, slot], INPUT_TOKENS[column]


@dataclass
class RolloutResult:
    ours: dict[str, int | None]
    flagger: dict[str, int | None]


def flagger_rollback(candidate_p99: list[float], limit: float, threshold: int = 2) -> int | None:
    """Flagger: a check fails when the value crosses the limit; roll back at `threshold` fails."""
    failed = 0
    for interval, value in enumerate(candidate_p99, start=1):
        if value > limit:
            failed += 1
            if failed >= threshold:
                return interval
    return None


def ours_rollback(
    intervals: list[tuple[VariantInterval, VariantInterval]],
    policy: LivePolicy,
    state: LiveState | None = None,
) -> int | None:
    state = state or LiveState()
    for interval, (base, cand) in enumerate(intervals, start=1):
        end = START + timedelta(minutes=interval)
        observation = LiveObservation(interval_end=end, baseline=base, candidate=cand)
        result = judge_interval(state, observation, policy, now=end)
        state = result.state
        if result.decision is LiveDecision.ROLLBACK:
            return interval
    return None


def live_rollout(
    rng: np.random.Generator,
    baseline: TtftTable,
    candidate: TtftTable,
    args: argparse.Namespace,
    policy: LivePolicy,
    prompt_sigma: float,
) -> RolloutResult:
    # The baseline's pre-rollout benchmark sets Flagger's absolute limit, as a user would.
    reference, _ = baseline.draw(rng, args.reference_requests, prompt_sigma)
    reference_p99 = float(np.quantile(reference, 0.99))
    # The baseline's CloudWatch history before the rollout: an hour of one-minute periods.
    history = [baseline.draw(rng, args.requests_per_interval, prompt_sigma)[0] for _ in range(60)]
    noise = calibrate_latency_noise(
        [args.requests_per_interval] * len(history),
        averages=[float(h.mean()) for h in history],
        p99s=[float(np.quantile(h, 0.99)) for h in history],
    )
    weights = [args.first_weight] * args.intervals_per_step + [0.5] * args.intervals_per_step
    plain: list[tuple[VariantInterval, VariantInterval]] = []
    with_tokens: list[tuple[VariantInterval, VariantInterval]] = []
    # What CloudWatch gives per variant and period: p99 ModelLatency, and its Average.
    cloudwatch_p99: list[tuple[VariantInterval, VariantInterval]] = []
    cloudwatch_average: list[tuple[VariantInterval, VariantInterval]] = []
    candidate_p99: list[float] = []
    for weight in weights:
        n_cand = max(1, round(weight * args.requests_per_interval))
        n_base = args.requests_per_interval - n_cand
        base_s, base_tokens = baseline.draw(rng, n_base, prompt_sigma)
        cand_s, cand_tokens = candidate.draw(rng, n_cand, prompt_sigma)
        candidate_p99.append(float(np.quantile(cand_s, 0.99)))
        plain.append(
            (
                VariantInterval(invocations=n_base, latency_samples_s=list(base_s)),
                VariantInterval(invocations=n_cand, latency_samples_s=list(cand_s)),
            )
        )
        base_p99, cand_p99 = float(np.quantile(base_s, 0.99)), float(np.quantile(cand_s, 0.99))
        cloudwatch_p99.append(
            (
                VariantInterval(invocations=n_base, latency_s=base_p99),
                VariantInterval(invocations=n_cand, latency_s=cand_p99),
            )
        )
        cloudwatch_average.append(
            (
                VariantInterval(
                    invocations=n_base, latency_s=base_p99, latency_mean_s=float(base_s.mean())
                ),
                VariantInterval(
                    invocations=n_cand, latency_s=cand_p99, latency_mean_s=float(cand_s.mean())
                ),
            )
        )
        with_tokens.append(
            (
                plain[-1][0].model_copy(update={"input_tokens": [int(t) for t in base_tokens]}),
                plain[-1][1].model_copy(update={"input_tokens": [int(t) for t in cand_tokens]}),
            )
        )
    ours = {
        "ours": ours_rollback(plain, policy),
        "ours_prompt_tokens": ours_rollback(with_tokens, policy),
        "ours_cloudwatch_p99": ours_rollback(cloudwatch_p99, policy),
        "ours_cloudwatch_average": ours_rollback(cloudwatch_average, policy),
        "ours_cloudwatch_p99_calibrated": ours_rollback(
            cloudwatch_p99, policy, LiveState(noise=noise)
        ),
        "ours_cloudwatch_average_calibrated": ours_rollback(
            cloudwatch_average, policy, LiveState(noise=noise)
        ),
    }
    flagger = {
        f"flagger_{round(100 * tol)}pct": flagger_rollback(candidate_p99, reference_p99 * (1 + tol))
        for tol in args.flagger_tolerances
    }
    return RolloutResult(ours, flagger)


def _upper95(events: int, trials: int) -> float:
    """One-sided 95 % upper bound of a rate (exact binomial, by bisection)."""
    low, high = events / trials, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        tail = sum(
            math.comb(trials, k) * mid**k * (1 - mid) ** (trials - k) for k in range(events + 1)
        )
        low, high = (mid, high) if tail > 0.05 else (low, mid)
    return high


def summarise(detections: list[int | None]) -> dict[str, float | int | None]:
    hits = [d for d in detections if d is not None]
    return {
        "rollouts": len(detections),
        "rollbackRate": len(hits) / len(detections),
        # Exact one-sided 95 % upper bound: 0 of 200 still allows 1.5 %, 0 of 1,000 0.3 %.
        "rollbackRateUpper95": _upper95(len(hits), len(detections)),
        "meanIntervalsToRollback": statistics.fmean(hits) if hits else None,
        "medianIntervalsToRollback": statistics.median(hits) if hits else None,
    }


def live_benchmark(args: argparse.Namespace) -> dict[str, object]:
    base_profile = VariantProfile()
    baseline = TtftTable.build(base_profile)
    policy = LivePolicy(alpha=args.alpha, latency_margin=args.margin, min_invocations=10)
    candidates = {
        label: TtftTable.build(with_regression(base_profile, latency_factor=factor))
        for label, factor in (("aa", 1.0), ("ttft+10%", 1.1), ("ttft+20%", 1.2), ("ttft+50%", 1.5))
    }
    traffic: dict[str, object] = {}
    for traffic_label, sigma in (("mixedPrompts", args.prompt_sigma), ("fixedShapeProbes", 0.0)):
        scenarios: dict[str, object] = {}
        for label, candidate in candidates.items():
            # More A/A rollouts: bounding a false-rollback rate near 1 % needs them.
            rollouts = args.aa_rollouts if label == "aa" else args.rollouts
            results = [
                live_rollout(
                    np.random.default_rng([args.seed, r]), baseline, candidate, args, policy, sigma
                )
                for r in range(rollouts)
            ]
            row: dict[str, object] = {}
            for name in results[0].ours:
                row[name] = summarise([r.ours[name] for r in results])
            for name in results[0].flagger:
                row[name] = summarise([r.flagger[name] for r in results])
            scenarios[label] = row
        traffic[traffic_label] = {"promptSigma": sigma, "scenarios": scenarios}
    return {
        "policy": policy.dump(),
        "intervals": 2 * args.intervals_per_step,
        "requestsPerInterval": args.requests_per_interval,
        "weights": [args.first_weight, 0.5],
        "traffic": traffic,
    }


def offline_benchmark(args: argparse.Namespace) -> dict[str, object]:
    """The benchmark judge on a 1,000-request TTFT benchmark per side (p50 and p99)."""
    base_profile = VariantProfile()
    baseline = TtftTable.build(base_profile)
    candidates = {
        label: TtftTable.build(with_regression(base_profile, latency_factor=factor))
        for label, factor in (("aa", 1.0), ("ttft+20%", 1.2), ("ttft+50%", 1.5))
    }
    out: dict[str, object] = {}
    for traffic_label, sigma in (("mixedPrompts", args.prompt_sigma), ("fixedShapeProbes", 0.0)):
        scenarios: dict[str, object] = {}
        for label, candidate in candidates.items():
            counts: dict[str, dict[str, int]] = {"p50": {}, "p99": {}}
            for r in range(args.rollouts):
                rng = np.random.default_rng([args.seed, 7, r])
                checks = judge_benchmark(
                    [LevelSamples(concurrency=8, ttft_s=list(baseline.draw(rng, 1_000, sigma)[0]))],
                    [
                        LevelSamples(
                            concurrency=8, ttft_s=list(candidate.draw(rng, 1_000, sigma)[0])
                        )
                    ],
                    BenchmarkPolicy(thresholds={"ttft_s": 0.10}, seed=r),
                )
                for check in checks:
                    key = "p50" if "p50" in check.name else "p99"
                    verdict = check.verdict.value
                    counts[key][verdict] = counts[key].get(verdict, 0) + 1
            scenarios[label] = {
                key: {v: n / args.rollouts for v, n in c.items()} for key, c in counts.items()
            }
        out[traffic_label] = scenarios
    return out


def eval_benchmark(args: argparse.Namespace) -> dict[str, object]:
    baseline = VariantProfile()
    scenarios = {
        "null(fp8)": VariantProfile(quantization="fp8"),
        "drop2pt": with_regression(VariantProfile(quantization="fp8"), quality_drop=0.02),
    }
    out: dict[str, object] = {}
    for label, candidate in scenarios.items():
        ours: dict[str, int] = {}
        fixed_fail = 0
        refusal_fail = 0
        for r in range(args.rollouts):
            seed = args.seed * 100_003 + r
            prompts = [f"item-{i}" for i in range(args.eval_items)]
            base = [eval_outcome(baseline, seed, p, 0.7) for p in prompts]
            cand = [eval_outcome(candidate, seed, p, 0.7) for p in prompts]
            base_scores = [float(o == "correct") for o in base]
            cand_scores = [float(o == "correct") for o in cand]
            check = eval_check(base_scores, cand_scores, "exact_match", max_absolute_drop=0.01)
            ours[check.verdict.value] = ours.get(check.verdict.value, 0) + 1
            # Fixed rule: one number against one number.
            if statistics.fmean(cand_scores) < statistics.fmean(base_scores) - 0.01:
                fixed_fail += 1
            refusals = refusal_check([o == "refusal" for o in base], [o == "refusal" for o in cand])
            refusal_fail += refusals.verdict is Verdict.FAIL
        out[label] = {
            "items": args.eval_items,
            "ours": {v: n / args.rollouts for v, n in ours.items()},
            "fixedRuleFailRate": fixed_fail / args.rollouts,
            # Promotion needs Pass from us; the fixed rule promotes whatever does not fail.
            "oursPromoteRate": ours.get("Pass", 0) / args.rollouts,
            "fixedRulePromoteRate": 1 - fixed_fail / args.rollouts,
            "refusalFailRate": refusal_fail / args.rollouts,
        }
    return out


def acceptance_benchmark(args: argparse.Namespace) -> dict[str, object]:
    out: dict[str, object] = {}
    profile = VariantProfile(speculative=Speculative("ngram", 3))
    k = 3
    for label, overlap in (("healthy(~0.6)", 1.0), ("bad(~0.2)", 0.3)):
        measured: list[float] = []
        fails = {"server counters": 0, "black-box estimate": 0}
        for r in range(args.rollouts):
            traces = simulate(profile, 4, 24, 512, OUTPUT_TOKENS, seed=r, overlap=overlap)
            server = sum(t.accepted_tokens for t in traces) / sum(t.draft_tokens for t in traces)
            # Black box: tokens per decode chunk is the mean acceptance length E = 1 + k*rate.
            chunks = [c for t in traces for c in t.chunk_tokens[1:]]
            estimate = min(1.0, max(0.0, (sum(chunks) / len(chunks) - 1.0) / k))
            measured.append(server)
            for source, value in (("server counters", server), ("black-box estimate", estimate)):
                fails[source] += acceptance_check(value, source).verdict is Verdict.FAIL
        out[label] = {
            "meanServerAcceptance": statistics.fmean(measured),
            "failRate": {s: n / args.rollouts for s, n in fails.items()},
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--rollouts", type=int, default=200)
    parser.add_argument("--aa-rollouts", type=int, default=1_000)
    parser.add_argument("--intervals-per-step", type=int, default=5)
    parser.add_argument("--requests-per-interval", type=int, default=120)
    parser.add_argument("--first-weight", type=float, default=0.1)
    parser.add_argument("--reference-requests", type=int, default=1_000)
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--margin", type=float, default=0.0)
    parser.add_argument("--prompt-sigma", type=float, default=0.7)
    parser.add_argument("--flagger-tolerances", type=float, nargs="+", default=[0.1, 0.2, 0.5])
    parser.add_argument("--eval-items", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/bench_judges.json"))
    args = parser.parse_args(argv)
    sections: dict[str, Callable[[argparse.Namespace], dict[str, object]]] = {
        "live": live_benchmark,
        "offline": offline_benchmark,
        "eval": eval_benchmark,
        "acceptance": acceptance_benchmark,
    }
    results: dict[str, object] = {"args": {k: str(v) for k, v in vars(args).items()}}
    for name, section in sections.items():
        started = time.perf_counter()
        results[name] = section(args)
        print(f"{name}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(json.dumps(results, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

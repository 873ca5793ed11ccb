"""What the real engine cannot express goes to the synthetic engine, endpoint-wide, labelled."""

from __future__ import annotations

import json

import pytest

from endpoint_optimizer.bench.served_by import REAL, SYNTHETIC
from endpoint_optimizer.realmodel import evalset
from endpoint_optimizer.realmodel.sandbox_engine import (
    RealSandboxEngine,
    SelectingEngine,
    map_variant,
    synthetic_answer,
)
from endpoint_optimizer.sandbox import evalset as synthetic_evalset
from endpoint_optimizer.sandbox.engine import LiveVariant, SyntheticEngine
from endpoint_optimizer.sandbox.serving import profile_from_environment

SMOL = "s3://models/smollm2-135m/"


def live(name: str, env: dict[str, str], *, compiled: bool = False) -> LiveVariant:
    profile = profile_from_environment("ml.g6e.2xlarge", SMOL, env, compiled=compiled)
    return LiveVariant("ep", name, "ep-config", f"{name}-model", profile, env, seed=7)


def pair(*variants: LiveVariant) -> tuple[LiveVariant, ...]:
    for variant in variants:
        variant.peers = variants
    return variants


def engine(default: str = "real") -> SelectingEngine:
    return SelectingEngine(SyntheticEngine(), RealSandboxEngine(), default=default)


@pytest.mark.parametrize(
    ("env", "compiled", "reason"),
    [
        ({"OPTION_QUANTIZE": "fp8"}, False, "fp8 needs FP8 tensor cores"),
        ({"OPTION_QUANTIZE": "awq"}, False, "w4a16 (awq/gptq) kernels are GPU-only"),
        ({}, True, "TensorRT-LLM/Neuron compilation has no CPU equivalent"),
        (
            {
                "OPTION_SPECULATIVE_CONFIG": json.dumps(
                    {"method": "eagle", "num_speculative_tokens": 3}
                )
            },
            False,
            "eagle speculation needs a draft model or EAGLE heads",
        ),
    ],
)
def test_techniques_a_cpu_cannot_run_are_fallbacks(
    env: dict[str, str], compiled: bool, reason: str
) -> None:
    variant = live("candidate", env, compiled=compiled)
    assert any(f.startswith(reason) for f in map_variant(variant.profile, env).fallbacks)
    served = engine().served_by(variant)
    assert served.engine == SYNTHETIC and served.fallback.startswith(reason)
    for text in map_variant(variant.profile, env).fallbacks:
        assert text.isascii() and ";" not in text and "=" not in text  # header-safe


def test_compilation_next_to_a_real_technique_is_served_real_and_named_omitted() -> None:
    # SmoothQuant INT8 is compiled by definition; its real int8 answers are the point.
    variant = live("candidate", {"OPTION_QUANTIZE": "smoothquant"}, compiled=True)
    mapping = map_variant(variant.profile, variant.environment)
    assert mapping.fallbacks == () and mapping.settings.quantization == "dynamic-int8"
    served = engine().served_by(variant)
    assert served.engine == REAL and "compilation" in served.omitted


def test_a_baseline_follows_its_fp8_candidate_and_an_ngram_pair_stays_real() -> None:
    baseline, fp8 = pair(live("baseline", {}), live("fp8", {"OPTION_QUANTIZE": "fp8"}))
    chooser = engine()
    assert chooser.served_by(fp8).fallback.startswith("fp8 needs")
    assert chooser.served_by(baseline).engine == SYNTHETIC
    assert chooser.served_by(baseline).fallback.startswith("paired with fp8: fp8 needs")

    ngram = json.dumps({"method": "ngram", "num_speculative_tokens": 4})
    base, spec = pair(live("baseline", {}), live("ngram", {"OPTION_SPECULATIVE_CONFIG": ngram}))
    assert chooser.served_by(base) == chooser.served_by(spec)
    assert chooser.served_by(spec).engine == REAL


def test_a_synthetic_choice_stays_synthetic_without_a_fallback_reason() -> None:
    baseline, fp8 = pair(live("baseline", {}), live("fp8", {"OPTION_QUANTIZE": "fp8"}))
    chooser = engine(default="synthetic")
    assert chooser.served_by(baseline).engine == SYNTHETIC
    assert chooser.served_by(baseline).fallback == ""
    # A peer that is synthetic by choice (not for a fallback) does not pull a real one along.
    real_one = live("real", {"SANDBOX_ENGINE": "real"})
    pair(real_one, fp8)
    assert chooser.served_by(real_one).engine == REAL


def test_every_real_eval_item_is_recognised_with_its_reference() -> None:
    for item in evalset.eval_items():
        key = evalset.lookup(item["prompt"])
        assert key is not None and (key.reference, key.kind) == (item["reference"], item["class"])
        assert item["reference"] not in evalset.wrong_answer(key, 0.5)
    assert evalset.lookup("Write a haiku about the sea.") is None


def test_under_the_fallback_real_eval_items_score_near_the_fp32_rates() -> None:
    items = evalset.eval_items()
    baseline, fp8 = pair(live("baseline", {}), live("fp8", {"OPTION_QUANTIZE": "fp8"}))
    chooser = engine()
    for variant in (baseline, fp8):
        answers = [chooser.answer(variant, item["prompt"]) for item in items]
        correct = sum(a == item["reference"] for a, item in zip(answers, items, strict=True))
        # 240 items, mean fp32 rate 0.87: fp8's modelled effect is small, so both land near it.
        assert 0.75 * len(items) < correct < 0.97 * len(items), variant.variant
        assert all(a is not None for a in answers)
    assert chooser.answer(fp8, "Tell me about lighthouses.") is None


def test_the_synthetic_eval_set_still_answers_by_its_own_rule() -> None:
    fp8 = live("fp8", {"OPTION_QUANTIZE": "fp8"})
    item = synthetic_evalset.generate(count=1)[0]
    answer = engine().answer(fp8, item.prompt)
    assert answer is not None
    assert synthetic_answer(fp8, item.prompt) is None  # not a real-eval-set prompt

"""Deterministic SageMaker names."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from endpoint_optimizer.sagemaker.naming import MAX_LENGTH, Owner, is_valid

k8s_name = st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", fullmatch=True)


@given(namespace=k8s_name, name=k8s_name, generation=st.integers(1, 10**9))
def test_every_name_fits_sagemaker_pattern_and_length(
    namespace: str, name: str, generation: int
) -> None:
    owner = Owner(namespace, name, "0b8e0a6c-2f6c-4e0b-9a51-1c1d7c1e5a11")
    for role in ("base", "cand", "cand-quant", "alarm"):
        result = owner.resource_name(role, generation)
        assert len(result) <= MAX_LENGTH
        assert is_valid(result)


def test_same_inputs_give_the_same_name_and_any_change_a_different_one() -> None:
    owner = Owner("ml", "llama-8b-chat", "uid-1")
    name = owner.resource_name("cand", 3)
    assert owner.resource_name("cand", 3) == name
    assert owner.resource_name("cand", 4) != name
    assert owner.resource_name("base", 3) != name
    assert Owner("ml", "llama-8b-chat", "uid-2").resource_name("cand", 3) != name
    assert name.startswith("ml-llama-8b-chat-cand-g3-")


def test_long_names_that_share_a_prefix_stay_apart() -> None:
    long = "x" * 200
    first = Owner("ns", long + "a", "u").resource_name("cand", 1)
    second = Owner("ns", long + "b", "u").resource_name("cand", 1)
    assert first != second
    assert len(first) == MAX_LENGTH


def test_variant_names_are_valid_and_deterministic() -> None:
    owner = Owner("ml", "chat", "u")
    assert owner.variant_name("candidate", 2) == owner.variant_name("candidate", 2)
    assert is_valid(owner.variant_name("candidate", 2))


@given(
    namespace=st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True),
    name=st.from_regex(r"[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?", fullmatch=True),
    generation=st.integers(min_value=1, max_value=999_999_999),
    role=st.sampled_from(
        [
            "base",
            "cand",
            "rollout",
            "pinned",
            "promoted",
            "opt",
            "alarm",
            "nospec",
            "nospec-rollout",
            "nospec-promoted",
            "cutoff",
            "cutoff-rollout",
            "ic",
        ]
    ),
)
def test_an_owner_recognises_its_own_names_and_no_other_uid_does(
    namespace: str, name: str, generation: int, role: str
) -> None:
    """The finalizer's sweep (aws/sweep.py) lists by search_hint and keeps what made() says."""
    owner = Owner(namespace, name, "uid-1")
    made = owner.resource_name(role, generation)
    assert owner.search_hint() in made
    assert owner.made(made)
    assert not Owner(namespace, name, "uid-2").made(made)
    assert not owner.made(made[:-1] + ("0" if made[-1] != "0" else "1"))
    assert not owner.made(f"{namespace}-{name}-model")

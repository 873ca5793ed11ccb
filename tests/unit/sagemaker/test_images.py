"""Default serving images come from the SageMaker SDK's own image-URI table."""

from __future__ import annotations

import pytest

from endpoint_optimizer.sagemaker import images


def test_lmi_image_for_a_region_comes_from_the_sdk_table() -> None:
    uri = images.default_image("us-east-1")
    assert uri.startswith("763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:")
    assert "-lmi" in uri


def test_regions_with_their_own_account_and_neuron_instances() -> None:
    assert images.default_image("af-south-1").startswith("626614931356.")
    neuron = images.default_image("us-west-2", images.framework_for("ml.inf2.24xlarge"))
    assert "neuronx" in neuron
    assert "tensorrtllm" in images.default_image(
        "us-east-1", images.framework_for("ml.g6.12xlarge", compiled=True)
    )


def test_unknown_region_says_to_set_the_image() -> None:
    with pytest.raises(images.ImageLookupError, match=r"spec\.model\.image"):
        images.default_image("xx-nowhere-9")

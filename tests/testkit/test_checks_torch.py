"""Each torch helper on tiny models: a correct model passes, a model with one bug fails naming the offender."""

from __future__ import annotations

import re

import pytest
import torch

from repliscope.testkit import (
    assert_compiled_matches_eager,
    assert_deterministic,
    assert_gradients_flow,
    assert_onnx_roundtrip,
    assert_output_shape,
    assert_state_dict_roundtrip,
)
from tests.testkit._models import (
    Calibrated,
    DetachedInput,
    NanGradient,
    SmallConvNet,
    TinyMLP,
    TwoHeads,
    UnusedLayer,
    ZeroedBranch,
    small_conv_net,
)

X = torch.randn(2, 8, generator=torch.Generator().manual_seed(1))
IMAGES = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(2))


class TestOutputShape:
    def test_returns_output_and_accepts_wildcards(self) -> None:
        out = assert_output_shape(TinyMLP(), X, (None, 4))
        assert out.shape == (2, 4)

    def test_wrong_shape_names_output_and_both_shapes(self) -> None:
        with pytest.raises(AssertionError, match=re.escape("output: shape (2, 4), expected (2, 5)")):
            assert_output_shape(TinyMLP(), X, (2, 5))

    def test_dict_outputs_by_name_and_in_order(self) -> None:
        inputs = (X, torch.randn(2, 5))
        assert_output_shape(TwoHeads(), inputs, {"output['logits']": (2, 3), "output['aux']": (2, 2)})
        assert_output_shape(TwoHeads(), inputs, [(2, 3), (2, 2)])
        with pytest.raises(AssertionError) as info:
            assert_output_shape(TwoHeads(), inputs, [(2, 3), (2, 9)])
        assert "output['aux']: shape (2, 2), expected (2, 9)" in str(info.value)
        with pytest.raises(AssertionError, match="expected one output tensor, the model returned 2"):
            assert_output_shape(TwoHeads(), inputs, (2, 3))

    def test_non_finite_output_fails(self) -> None:
        model = TinyMLP()
        with torch.no_grad():
            model.fc2.bias[1] = float("nan")
        with pytest.raises(AssertionError, match=r"output: 2 of 8 values are NaN or Inf"):
            assert_output_shape(model, X, (2, 4))


class TestGradients:
    def test_correct_models_pass(self) -> None:
        assert_gradients_flow(TinyMLP(), X)
        assert_gradients_flow(TwoHeads(), (X, torch.randn(2, 5)))
        assert_gradients_flow(SmallConvNet(), IMAGES)

    def test_unused_layer_lists_every_parameter_of_it(self) -> None:
        with pytest.raises(AssertionError) as info:
            assert_gradients_flow(UnusedLayer(), X)
        message = str(info.value)
        assert "2 of 6 trainable parameters and 0 of 1 floating inputs" in message
        assert "parameter 'head.weight' (4, 4): no gradient" in message
        assert "parameter 'head.bias' (4,): no gradient" in message
        assert "fc1" not in message

    def test_detached_input_is_reported(self) -> None:
        with pytest.raises(AssertionError) as info:
            assert_gradients_flow(DetachedInput(), X)
        assert "input 0 (2, 8): no gradient" in str(info.value)
        assert "parameter" not in str(info.value).split("\n", 1)[1]

    def test_zero_and_nan_gradients(self) -> None:
        with pytest.raises(AssertionError, match=r"parameter 'gate' \(4,\): gradient is exactly zero everywhere"):
            assert_gradients_flow(ZeroedBranch(), X)
        with pytest.raises(AssertionError, match=r"parameter 'fc2.bias' \(4,\): 4 of 4 gradient entries are NaN"):
            assert_gradients_flow(NanGradient(), X)

    def test_ignore_frozen_and_custom_loss(self) -> None:
        assert_gradients_flow(UnusedLayer(), X, ignore=["head.*"])
        frozen = UnusedLayer()
        frozen.head.requires_grad_(False)
        assert_gradients_flow(frozen, X)
        assert_gradients_flow(TinyMLP(), X, loss_fn=lambda out: out[:, 1:].sum())
        with pytest.raises(AssertionError) as info:
            assert_gradients_flow(TinyMLP(), X, loss_fn=lambda out: (out * 0.0).sum())
        assert str(info.value).count("gradient is exactly zero everywhere") == 5  # 4 parameters + the input

    def test_fully_detached_output(self) -> None:
        class NoGrad(TinyMLP):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                with torch.no_grad():
                    return super().forward(x)

        with pytest.raises(AssertionError, match="the loss does not require grad at all") as info:
            assert_gradients_flow(NoGrad(), X)
        assert "4 of 4 trainable parameters and 1 of 1 floating inputs" in str(info.value)

    def test_model_state_is_restored(self) -> None:
        model = SmallConvNet().eval()
        model.fc.weight.grad = marker = torch.zeros_like(model.fc.weight)
        running = model.bn.running_mean.clone()
        rng = torch.get_rng_state()
        assert_gradients_flow(model, IMAGES)  # runs in train mode: batch norm would update its statistics
        assert not model.training and not model.bn.training
        assert torch.equal(model.bn.running_mean, running)
        assert model.fc.weight.grad is marker and model.stem.weight.grad is None
        assert torch.equal(torch.get_rng_state(), rng)


class TestStateDict:
    def test_roundtrip_passes_bit_exact(self) -> None:
        assert_state_dict_roundtrip(small_conv_net(), IMAGES, SmallConvNet)

    def test_non_persistent_buffer_is_named(self) -> None:
        model = Calibrated()
        model.calibrate(2.0)
        with pytest.raises(AssertionError) as info:
            assert_state_dict_roundtrip(model, X, Calibrated)
        message = str(info.value)
        assert "output: 8 of 8 elements differ (bit-identical required)" in message
        assert "buffer 'scale' is not in the state_dict (persistent=False) and differs" in message

    def test_factory_of_other_architecture_lists_keys(self) -> None:
        with pytest.raises(AssertionError) as info:
            assert_state_dict_roundtrip(TinyMLP(), X, UnusedLayer)
        assert "missing key 'head.weight'" in str(info.value) and "missing key 'head.bias'" in str(info.value)
        with pytest.raises(AssertionError, match=re.escape("unexpected key 'head.weight'")):
            assert_state_dict_roundtrip(UnusedLayer(), X, TinyMLP)

    def test_train_mode_dropout_is_seeded(self) -> None:
        model = small_conv_net()
        assert_state_dict_roundtrip(model, IMAGES, SmallConvNet, train=True)


class TestDeterminism:
    def test_eval_mode_is_bit_identical_and_flags_restored(self) -> None:
        before = torch.are_deterministic_algorithms_enabled()
        assert_deterministic(SmallConvNet().eval(), IMAGES, runs=3)
        assert torch.are_deterministic_algorithms_enabled() == before

    def test_train_mode_dropout_fails_and_names_the_module(self) -> None:
        model = SmallConvNet().train()
        with pytest.raises(AssertionError) as info:
            assert_deterministic(model, IMAGES)
        message = str(info.value)
        assert "run 2 vs run 1: output:" in message and "bit-identical required" in message
        assert "'drop' (Dropout)" in message
        assert model.training  # mode restored

    def test_seeded_train_mode_is_reproducible(self) -> None:
        assert_deterministic(SmallConvNet().train(), IMAGES, seed=0)
        assert_deterministic(SmallConvNet().train(), IMAGES, train=False)


class TestOnnx:
    def test_small_conv_net_roundtrip(self, tmp_path) -> None:
        assert_onnx_roundtrip(small_conv_net(), IMAGES, path=tmp_path / "net.onnx")
        assert (tmp_path / "net.onnx").stat().st_size > 0

    def test_two_inputs_dict_outputs_legacy_exporter(self) -> None:
        assert_onnx_roundtrip(TwoHeads(), (X, torch.randn(2, 5)), dynamo=False)

    def test_mismatch_is_reported_with_max_diff(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import onnxruntime

        real = onnxruntime.InferenceSession.run

        def skewed(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            outputs = real(self, *args, **kwargs)
            outputs[0][0, 3] += 0.01
            return outputs

        monkeypatch.setattr(onnxruntime.InferenceSession, "run", skewed)
        with pytest.raises(AssertionError) as info:
            assert_onnx_roundtrip(TinyMLP(), X, dynamo=False)
        assert re.search(
            r"output / onnxruntime '\w+': 1 of 8 elements differ beyond atol=1e-05, rtol=0.0001; "
            r"max abs diff 0.01 at \(0, 3\)",
            str(info.value),
        )


class TestCompile:
    def test_aot_eager_matches(self) -> None:
        assert_compiled_matches_eager(small_conv_net(), IMAGES, backend="aot_eager", fullgraph=True)

    def test_mismatch_names_the_backend(self) -> None:
        def wrong_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
            def run(*args):  # type: ignore[no-untyped-def]
                return [o * 1.001 if isinstance(o, torch.Tensor) else o for o in gm(*args)]

            return run

        with pytest.raises(
            AssertionError,
            match=r"(?s)assert_compiled_matches_eager\(backend=wrong_backend\) .*"
            r"output: 8 of 8 elements differ beyond atol=1e-05",
        ):
            assert_compiled_matches_eager(TinyMLP(), X, backend=wrong_backend)

    def test_inductor_matches(self) -> None:
        # ~15 s with a cold Inductor cache on a 2-core CPU (C++ compilation), ~2 s warm.
        assert_compiled_matches_eager(TinyMLP(), X, backend="inductor")

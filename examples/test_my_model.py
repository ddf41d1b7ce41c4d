"""Model unit tests with the repliscope test kit: copy this file into your test suite and swap in your model.

Run:  pytest examples/test_my_model.py            (repliscope installed: the plugin loads by itself)
      pytest -p repliscope.testkit.plugin examples/test_my_model.py     (from a source checkout)

The ``model_check`` fixture comes from the plugin; the same checks are plain functions in
``repliscope.testkit`` (``assert_output_shape``, ``assert_gradients_flow``, ...) for use outside pytest.
Tolerances: ``--repliscope-atol`` / ``--repliscope-rtol`` / ``--repliscope-compile-backend`` on the command line,
``repliscope_atol = ...`` in the ini file, or ``@pytest.mark.repliscope_model(atol=...)`` on one test.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn


# ---- your model: replace with e.g. `from my_package.models import build_model` ---------------------------
class MyClassifier(nn.Module):
    """A small image classifier: conv stem, batch norm, ReLU6, a depthwise residual block, pooling, dropout."""

    def __init__(self, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU6())
        self.block = nn.Sequential(nn.Conv2d(width, width, 3, padding=1, groups=width, bias=False),
                                   nn.BatchNorm2d(width), nn.ReLU6())
        self.dropout = nn.Dropout(0.2)
        self.head = nn.Linear(width, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.stem(images)
        x = x + self.block(x)
        return self.head(self.dropout(x.mean(dim=(2, 3))))


def build_model() -> MyClassifier:
    """The factory the state_dict round trip rebuilds the model with (same architecture, any weights)."""
    return MyClassifier(num_classes=10)


# ---- fixtures ----------------------------------------------------------------------------------------------
@pytest.fixture
def model() -> MyClassifier:
    torch.manual_seed(0)
    return build_model().eval()


@pytest.fixture
def images() -> torch.Tensor:
    return torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))


# ---- passthrough / shape ------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", [1, 4])
def test_passthrough(model_check, model, batch):
    """Data goes through; the logits have the right shape and no NaN/Inf. None matches any size."""
    images = torch.randn(batch, 3, 32, 32)
    model_check.output_shape(model, images, (batch, 10))
    model_check.output_shape(model, torch.randn(2, 3, 48, 40), (None, 10))  # any resolution (global pooling)


# ---- gradients ----------------------------------------------------------------------------------------------
def test_every_parameter_and_the_input_get_a_gradient(model_check, model, images):
    """Train mode, fixed seed: a forgotten layer, a .detach() or a NaN in backward is named here."""
    model_check.gradients_flow(model, images)


def test_gradients_with_the_real_loss(model_check, model, images):
    labels = torch.tensor([0, 3, 5, 9])
    model_check.gradients_flow(model, images, loss_fn=lambda logits: nn.functional.cross_entropy(logits, labels))


# ---- serialization --------------------------------------------------------------------------------------------
def test_state_dict_roundtrip(model_check, model, images):
    """save -> torch.load(weights_only=True) -> build_model().load_state_dict(strict): bit-identical outputs."""
    model_check.state_dict_roundtrip(model, images, build_model)


def test_onnx_roundtrip(model_check, model, images, tmp_path):
    pytest.importorskip("onnxruntime")
    model_check.onnx_roundtrip(model, images, path=tmp_path / "my_model.onnx")  # keep the file for inspection


# ---- determinism ------------------------------------------------------------------------------------------------
def test_inference_is_deterministic(model_check, model, images):
    model_check.deterministic(model, images, runs=3)


def test_training_step_is_reproducible_with_a_seed(model_check, model, images):
    """Dropout samples in train mode: two unseeded runs differ (that is reported), seeded runs must not."""
    model_check.deterministic(model, images, train=True, seed=1234)


# ---- torch.compile ----------------------------------------------------------------------------------------------
@pytest.mark.repliscope_model(compile_backend="aot_eager")
def test_compiles_fast_check(model_check, model, images):
    """aot_eager: Dynamo + AOTAutograd tracing without code generation, well under a second."""
    model_check.compiled_matches_eager(model, images, fullgraph=True)


def test_compiled_inductor_matches_eager(model_check, model, images):
    """inductor (the default) compiles C++: a C++ compiler is needed; first run ~15 s on a small CPU, then cached."""
    model_check.compiled_matches_eager(model, images)


# ---- the same checks without the fixture, and a Keras model --------------------------------------------------
def test_plain_helpers(model, images):
    from repliscope.testkit import assert_gradients_flow, assert_output_shape

    assert_output_shape(model, images, (4, 10))
    assert_gradients_flow(model, images, train=False)


def test_keras_model_roundtrip(model_check):
    keras = pytest.importorskip("keras")  # KERAS_BACKEND defaults to tensorflow
    import numpy as np

    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Conv2D(16, 3, strides=2, padding="same", use_bias=False)(inputs)
    x = keras.layers.ReLU(6.0)(keras.layers.BatchNormalization()(x))
    outputs = keras.layers.Dense(10)(keras.layers.GlobalAveragePooling2D()(x))
    model = keras.Model(inputs, outputs)
    model_check.keras_roundtrip(model, np.random.default_rng(0).standard_normal((4, 32, 32, 3)).astype("float32"))

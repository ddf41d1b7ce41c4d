"""``assert_keras_roundtrip`` on small Keras 3 models (TensorFlow backend unless KERAS_BACKEND says otherwise)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from repliscope.testkit import assert_keras_roundtrip

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
keras = pytest.importorskip("keras")

X = np.random.default_rng(0).standard_normal((2, 8, 8, 3)).astype("float32")


@keras.saving.register_keras_serializable(package="repliscope_tests")
class Scale(keras.layers.Layer):
    """A custom layer whose ``get_config`` forgets its ``factor`` argument (the classic serialization bug)."""

    def __init__(self, factor: float = 1.0, complete_config: bool = False, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.factor = factor
        self.complete_config = complete_config

    def call(self, x):  # type: ignore[no-untyped-def]
        return x * self.factor

    def get_config(self) -> dict[str, object]:
        config = super().get_config()
        if self.complete_config:
            config.update(factor=self.factor, complete_config=True)
        return config


def _model(scale: keras.layers.Layer | None = None) -> keras.Model:
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, padding="same")(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU(6.0)(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same")(x)
    if scale is not None:
        x = scale(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(5)(x))


def test_small_keras_model_roundtrip() -> None:
    assert_keras_roundtrip(_model(Scale(2.0, complete_config=True)), X)


def test_forgotten_config_argument_changes_outputs() -> None:
    with pytest.raises(AssertionError) as info:
        assert_keras_roundtrip(_model(Scale(2.0)), X)
    message = str(info.value)
    assert "output: 10 of 10 elements differ beyond atol=0, rtol=0" in message
    assert "weight" not in message  # the weights survive, the configuration does not


def test_unserializable_layer_fails_with_a_fix() -> None:
    class Unregistered(keras.layers.Layer):
        def __init__(self, factor: float, **kwargs: object) -> None:  # no default, no get_config
            super().__init__(**kwargs)
            self.factor = factor

        def call(self, x):  # type: ignore[no-untyped-def]
            return x * self.factor

    expected = r"(?s)save/load failed: .*Could not locate class 'Unregistered'.*register_keras_serializable"
    with pytest.raises(AssertionError, match=expected):
        assert_keras_roundtrip(_model(Unregistered(2.0)), X)

"""The keras runtimes: a .keras file built here, on this process' backend (TensorFlow) and on JAX in a worker
process (the record shows JAX executed: backend, platform and the array type the call returned)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repliscope.errors import FrameworkError
from repliscope.runtimes import ModelArtifact, ModelLoadError, create_runner

pytest.importorskip("jax")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
keras = pytest.importorskip("keras")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A two-output functional model (N, 8, 8, 3) -> logits (N, 5), embedding (N, 4), saved as .keras."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 3), name="image")
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3, activation="relu")(inp))
    model = keras.Model(
        inp,
        {"logits": keras.layers.Dense(5, name="logits")(x), "embedding": keras.layers.Dense(4, name="embedding")(x)},
    )
    path = tmp_path_factory.mktemp("keras") / "tiny.keras"
    model.save(path)
    return path, model


def _artifact(path: Path, outputs: tuple[str, ...]) -> ModelArtifact:
    return ModelArtifact(
        path=path,
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        format="keras",
        input_name="image",
        input_shape=(-1, 8, 8, 3),
        input_dtype="float32",
        output_names=outputs,
    )


X = np.random.default_rng(0).normal(size=(3, 8, 8, 3)).astype(np.float32)


def test_keras_runs_on_this_process_backend(model_file: tuple[Path, Any], tmp_path: Path) -> None:
    path, model = model_file
    assert keras.backend.backend() == "tensorflow"
    runner = create_runner("keras", _artifact(path, ("embedding", "logits")), threads=1, cache_dir=tmp_path)
    got = runner.infer_outputs(X)
    ref = model(X, training=False)
    assert list(got) == ["embedding", "logits"]
    for name in got:
        np.testing.assert_allclose(got[name], np.asarray(ref[name]), atol=1e-6)
    assert runner.notes["backend"] == "tensorflow"
    assert runner.notes["execution"] == {"where": "this process", "why": "keras is imported in this process with it"}
    assert runner.notes["returned"] == "tensorflow.python.framework.ops.EagerTensor"


def test_keras_jax_executes_in_a_jax_worker(model_file: tuple[Path, Any], tmp_path: Path) -> None:
    path, model = model_file
    runner = create_runner("keras_jax", _artifact(path, ("logits",)), threads=1, cache_dir=tmp_path)
    got = runner.infer(X)
    np.testing.assert_allclose(got, np.asarray(model(X, training=False)["logits"]), atol=1e-5)
    notes = runner.notes
    assert notes["backend"] == "jax" and notes["returned"] == "jaxlib._jax.ArrayImpl"
    assert notes["jax"]["platform"] == "cpu"
    assert notes["jax"]["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    assert notes["execution"]["where"] == "worker process" and notes["execution"]["pid"] != os.getpid()
    assert notes["execution"]["why"] == (
        "this process' Keras backend is 'tensorflow' (keras is imported in this process with it)"
    )
    assert keras.backend.backend() == "tensorflow"  # this process was not switched
    np.testing.assert_allclose(runner.infer(X[:1]), got[:1], atol=1e-6)  # the worker serves batch after batch


def test_keras_errors(model_file: tuple[Path, Any], tmp_path: Path) -> None:
    path, _ = model_file
    with pytest.raises(ModelLoadError, match=r"no output named 'scores'.*its outputs are: "):
        create_runner("keras", _artifact(path, ("scores", "logits")), threads=1, cache_dir=tmp_path).load()
    with pytest.raises(
        ModelLoadError,
        match=r"^'tiny\.keras' has no output named 'scores' .*its outputs are: .* "
        r"\(in the Keras jax worker process\)$",
    ):
        create_runner("keras_jax", _artifact(path, ("scores", "logits")), threads=1, cache_dir=tmp_path).load()
    onnx = ModelArtifact(**{**_artifact(path, ()).__dict__, "format": "onnx"})
    with pytest.raises(ModelLoadError, match="the keras_tensorflow runtime runs 'keras' sources"):
        create_runner("keras_tensorflow", onnx, threads=1, cache_dir=tmp_path).load()


def test_a_file_that_is_not_a_keras_zip_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "cut.keras"
    bad.write_bytes(b"PK\x03\x04 truncated")
    for runtime in ("keras", "keras_jax"):  # refused before any worker starts
        with pytest.raises(
            ModelLoadError,
            match=r"'.*cut\.keras' is not a \.keras file \(a \.keras model is a zip "
            r"archive; this file is not one, or is truncated\)",
        ):
            create_runner(runtime, _artifact(bad, ()), threads=1, cache_dir=tmp_path).load()


def test_a_missing_backend_in_the_worker_is_one_line(
    model_file: tuple[Path, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shadow = tmp_path / "shadow" / "jax"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'jax'\", name='jax')\n")
    monkeypatch.setenv("PYTHONPATH", str(shadow.parent))  # the worker process cannot import jax
    path, _ = model_file
    with pytest.raises(FrameworkError) as info:
        create_runner("keras_jax", _artifact(path, ()), threads=1, cache_dir=tmp_path).load()
    assert str(info.value) == (
        "the keras_jax runtime needs the Python module 'jax', which is not installed (pip "
        "install 'repliscope[jax]') (in the Keras jax worker process)"
    )

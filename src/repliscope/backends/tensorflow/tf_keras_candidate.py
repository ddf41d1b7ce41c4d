"""A tf_keras (Keras 2) model as a layer-diff candidate: an ``.h5`` file or a SavedModel folder written by tf_keras
(it holds ``keras_metadata.pb``), as the TensorFlow Model Garden saves its models.

Loaded with ``tf_keras.models.load_model(path, compile=False)`` and compared as a
:class:`~repliscope.backends.keras.candidate.KerasNestedCandidate`: every layer and sub-layer is a unit, named by
its path (``backbone/conv_0/bn``). A SavedModel revives the layers whose classes are not importable (their saved
graph runs; their tracked sub-layers can still be called alone in golden mode); an ``.h5`` file needs the classes,
so a model with custom layers is given as its SavedModel folder or as a callable ``FILE.py:NAME`` that builds it.
"""

from __future__ import annotations

from pathlib import Path

from repliscope.backends.keras.candidate import KerasNestedCandidate
from repliscope.errors import RepliscopeError

SUFFIXES = (".h5", ".hdf5")


def is_tf_keras_savedmodel(path: Path) -> bool:
    """A SavedModel folder written by tf_keras (``model.save(DIR)``): ``saved_model.pb`` and ``keras_metadata.pb``."""
    return path.is_dir() and (path / "saved_model.pb").is_file() and (path / "keras_metadata.pb").is_file()


class TfKerasCandidate(KerasNestedCandidate):
    """A tf_keras model's layers and sub-layers by path (the ``tf_keras`` entry of the candidate registry)."""

    @classmethod
    def from_path(cls, path: Path) -> TfKerasCandidate:
        return load_tf_keras(path)


def load_tf_keras(path: Path) -> TfKerasCandidate:
    """The tf_keras model at ``path`` as a candidate; RepliscopeError naming what to give instead."""
    path = Path(path)
    if not (is_tf_keras_savedmodel(path) or (path.is_file() and path.suffix.lower() in SUFFIXES)):
        raise RepliscopeError(
            f"tf_keras candidate '{path}': give an .h5 file or a SavedModel folder written by tf_keras (with "
            "saved_model.pb and keras_metadata.pb)"
        )
    try:
        import tf_keras
    except ImportError:
        raise RepliscopeError(
            "a tf_keras candidate needs tf_keras: pip install 'repliscope[keras]' (tf-keras==2.21.0)"
        ) from None
    try:
        model = tf_keras.models.load_model(str(path), compile=False)
    except Exception as exc:
        first = str(exc).splitlines()[0][:300] if str(exc) else ""
        hint = (
            "; an .h5 file needs the classes of its custom layers: save the model as a SavedModel folder "
            "(model.save(DIR): tf_keras revives the layers it has no class for) or give a callable FILE.py:NAME "
            "that builds it and returns its named tensors"
            if path.is_file()
            else ""
        )
        raise RepliscopeError(f"cannot load the tf_keras model '{path}': {type(exc).__name__}: {first}{hint}") from None
    return TfKerasCandidate(model, tf_keras, source=str(path), flavour="tf_keras")

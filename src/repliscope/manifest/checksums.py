"""sha256 of model files as ``source.sha256`` states it: the bottom of :mod:`repliscope.manifest` (the source
resolvers and the package-archive fetchers both check against it)."""

from __future__ import annotations

import hashlib
from pathlib import Path

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


SAVED_MODEL_FILE = "saved_model.pb"
MAX_SAVED_MODEL_FILES = 100_000


def saved_model_sha256(pb: Path) -> tuple[str, list[str]]:
    """The sha256 ``source.sha256`` states for a TensorFlow SavedModel named by its ``saved_model.pb``: over EVERY
    file of the folder holding it (``variables/``, ``assets/``, ``fingerprint.pb``...), as the lines
    ``<relative posix path>\0<file sha256>\n`` in path order, so two SavedModels that share a graph but not their
    weights never share a hash. (hash, the relative paths covered). A link or a special file inside the folder is
    refused: what is hashed is exactly what TensorFlow reads."""
    from repliscope.errors import ChecksumError

    folder = pb.parent
    files: list[str] = []
    for entry in sorted(folder.rglob("*")):
        rel = entry.relative_to(folder).as_posix()
        if entry.is_symlink():
            raise ChecksumError(f"SavedModel {folder}: {rel} is a link; a SavedModel's files must be in its folder")
        if entry.is_dir():
            continue
        if not entry.is_file():
            raise ChecksumError(f"SavedModel {folder}: {rel} is not a regular file")
        files.append(rel)
        if len(files) > MAX_SAVED_MODEL_FILES:
            raise ChecksumError(f"SavedModel {folder}: more than {MAX_SAVED_MODEL_FILES:,} files")
    h = hashlib.sha256()
    for rel in files:
        h.update(f"{rel}\0{sha256_file(folder / rel)}\n".encode())
    return h.hexdigest(), files


def source_file_sha256(path: Path) -> str:
    """What ``source.sha256`` must be for the file ``path``: for an ``.onnx`` model the hash over the model and
    its checked external data files (:func:`repliscope.runtimes.onnx_external.source_sha256`), for a SavedModel's
    ``saved_model.pb`` the hash over its whole folder (:func:`saved_model_sha256`), else the file's sha256."""
    if path.name == SAVED_MODEL_FILE:
        return saved_model_sha256(path)[0]
    if path.suffix.lower() != ".onnx":
        return sha256_file(path)
    from repliscope.runtimes.onnx_external import NotOnnxError, source_sha256

    try:
        return source_sha256(path)[0]
    except NotOnnxError:  # not an ONNX model at all: nothing external to cover (a runtime refuses the file)
        return sha256_file(path)

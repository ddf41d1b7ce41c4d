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


def source_file_sha256(path: Path) -> str:
    """What ``source.sha256`` must be for the file ``path``: for an ``.onnx`` model the hash over the model and
    its checked external data files (:func:`repliscope.runtimes.onnx_external.source_sha256`), else the file's
    sha256."""
    if path.suffix.lower() != ".onnx":
        return sha256_file(path)
    from repliscope.runtimes.onnx_external import NotOnnxError, source_sha256

    try:
        return source_sha256(path)[0]
    except NotOnnxError:  # not an ONNX model at all: nothing external to cover (a runtime refuses the file)
        return sha256_file(path)

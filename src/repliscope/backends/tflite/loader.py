"""Read a ``.tflite`` file for an interpreter, so that a damaged file is an error, never a crash.

``tf.lite.Interpreter(model_path=...)`` builds the model WITHOUT the flatbuffer verifier: a truncated file
segfaults the process (exit 139). Given the bytes (``model_content``) the interpreter runs
``FlatBufferModel::VerifyAndBuildFromBuffer`` first and raises ``ValueError``. :func:`read_tflite` returns those
bytes after the cheap checks (a regular file, at most 2 GiB, the flatbuffer limit; the ``TFL3`` file identifier).
"""

from __future__ import annotations

import os
from pathlib import Path

from repliscope.errors import RepliscopeError

MAX_TFLITE_BYTES = (1 << 31) - 1
"""A flatbuffer addresses at most 2 GiB."""
_IDENTIFIER = b"TFL3"


def read_tflite(path: str | Path) -> bytes:
    """The bytes of the ``.tflite`` file ``path`` (to pass as ``model_content``); RepliscopeError naming the file
    and the problem when it is not a regular file, too large, or lacks the TFLite file identifier."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_TFLITE_BYTES:
                raise RepliscopeError(f"'{p}' is {size:,} bytes, more than a TFLite flatbuffer can hold (2 GiB)")
            data = fh.read(MAX_TFLITE_BYTES + 1)
    except OSError as exc:
        raise RepliscopeError(f"cannot read the TFLite model '{p}': {exc.strerror or exc}") from None
    if len(data) < 8 or data[4:8] != _IDENTIFIER:
        raise RepliscopeError(f"'{p}' is not a TFLite model: no 'TFL3' flatbuffer identifier ({len(data)} bytes)")
    return data

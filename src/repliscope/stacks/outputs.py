"""Raw model outputs as JSON-safe text (they travel back from an agent, possibly in another venv, as JSON)."""

from __future__ import annotations

import base64
import io

import numpy as np


def encode_outputs(outputs: dict[str, np.ndarray]) -> dict[str, str]:
    """sample id -> base64 of the array's ``.npy`` bytes (float32 1-D rows stay float32, bit-exact)."""
    encoded = {}
    for sample_id, array in outputs.items():
        buf = io.BytesIO()
        np.save(buf, np.asarray(array), allow_pickle=False)
        encoded[sample_id] = base64.b64encode(buf.getvalue()).decode("ascii")
    return encoded


def decode_outputs(encoded: dict[str, str]) -> dict[str, np.ndarray]:
    """The inverse of :func:`encode_outputs`."""
    return {
        sample_id: np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)
        for sample_id, text in encoded.items()
    }

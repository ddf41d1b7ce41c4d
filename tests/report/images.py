"""Decode an embedded PNG (data URI) and check it is a real, non-empty image."""

from __future__ import annotations

import base64
import io

from PIL import Image

PREFIX = "data:image/png;base64,"


def decode_data_uri(src: str) -> Image.Image:
    assert src.startswith(PREFIX), f"not a PNG data URI: {src[:60]!r}"
    data = base64.b64decode(src[len(PREFIX) :], validate=True)
    image = Image.open(io.BytesIO(data))
    image.load()
    assert image.format == "PNG"
    assert image.width > 0 and image.height > 0
    return image

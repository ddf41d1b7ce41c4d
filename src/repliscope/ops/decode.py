"""``decode``: encoded file bytes -> HxWx3 uint8 image."""

from __future__ import annotations

import io
from typing import Literal

import numpy as np
import PIL
from PIL import Image, ImageFile

from repliscope.errors import OpSpecError, RepliscopeError, SampleError
from repliscope.ops.base import OPS, Channels, Item, OpParams, PreOp, StaticShape


class DecodeParams(OpParams):
    library: Literal["pillow", "opencv"]
    channels: Channels
    """Channel order of the output."""


@OPS.register("decode")
class Decode(PreOp):
    """Decode encoded image bytes with Pillow or OpenCV.

    In: 1-D uint8 array of file bytes, layout ``encoded``. Out: HxWx3 uint8, layout ``HWC``, ``channels``
    as requested. The file format is sniffed from the content (a PNG named ``.jpg`` decodes fine); only the
    first frame of a multi-frame file is used.

    Conversions to 3 channels, all explicit:

    - grayscale, palette, 1-bit, CMYK and YCbCr become RGB (Pillow ``convert("RGB")``; OpenCV
      ``IMREAD_COLOR``). CMYK JPEGs differ by about one level between the two libraries.
    - alpha (LA, PA, RGBA, palette transparency) is DROPPED, not composited over a background.
    - 16-bit samples become 8-bit by keeping the high byte (``x >> 8``), which is what OpenCV's
      ``IMREAD_COLOR`` does; Pillow's ``convert`` would clip 16-bit gray, so that path shifts explicitly.

    EXIF orientation is NOT applied by either library (Pillow never applies it; OpenCV is called with
    ``IMREAD_IGNORE_ORIENTATION``, unlike ``cv2.imread``'s default), matching common evaluation code.

    Empty, corrupt or truncated data raises :class:`SampleError`; truncated files are never padded
    (Pillow's ``ImageFile.LOAD_TRUNCATED_IMAGES`` must stay False).
    """

    name = "decode"
    Params = DecodeParams
    params: DecodeParams

    def library(self) -> tuple[str, str]:
        if self.params.library == "pillow":
            return "pillow", PIL.__version__
        import cv2

        return "opencv", cv2.__version__

    def static_shape(self, shape: StaticShape) -> StaticShape:
        if shape.layout != "encoded":
            raise OpSpecError("op", f"'decode' needs encoded bytes, got layout '{shape.layout}' (decode twice?)")
        return StaticShape("HWC", channels=3)

    def __call__(self, item: Item) -> Item:
        if item.layout != "encoded":
            raise OpSpecError("op", f"'decode' needs encoded bytes, got layout '{item.layout}'")
        buf = np.asarray(item.data, dtype=np.uint8).reshape(-1)
        if buf.size == 0:
            raise SampleError("cannot decode: empty data (0 bytes)")
        if self.params.library == "pillow":
            rgb = _decode_pillow(buf.tobytes())
            out = rgb if self.params.channels == "RGB" else rgb[..., ::-1]
        else:
            bgr = _decode_opencv(buf)
            out = bgr if self.params.channels == "BGR" else bgr[..., ::-1]
        return Item(np.ascontiguousarray(out), layout="HWC", channels=self.params.channels)


def _decode_pillow(data: bytes) -> np.ndarray:
    """RGB uint8 HxWx3 via Pillow; see :class:`Decode` for the mode conversions."""
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        raise RepliscopeError(
            "cannot decode: PIL.ImageFile.LOAD_TRUNCATED_IMAGES is True, which pads truncated files"
        )
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            return _pillow_to_rgb(im)
    except SampleError:
        raise
    except Image.DecompressionBombError as exc:
        raise SampleError(f"cannot decode with pillow: {exc}") from exc
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        reason = str(exc) or type(exc).__name__
        if "truncated" in reason.lower():
            reason = f"truncated file ({reason})"
        raise SampleError(f"cannot decode with pillow: {reason}") from exc


def _pillow_to_rgb(im: Image.Image) -> np.ndarray:
    if im.mode == "RGB":
        return np.asarray(im, dtype=np.uint8)
    if im.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        raw = np.asarray(im)
        if raw.size and (raw.min() < 0 or raw.max() > 0xFFFF):
            raise SampleError(f"cannot decode: pixel mode {im.mode} with values outside 16 bits")
        gray = (raw.astype(np.uint32) >> 8).astype(np.uint8)
        return np.repeat(gray[..., None], 3, axis=-1)
    if im.mode in ("F",) or im.mode.startswith("I;"):
        raise SampleError(f"cannot decode: unsupported pixel mode {im.mode}")
    return np.asarray(im.convert("RGB"), dtype=np.uint8)


def _decode_opencv(buf: np.ndarray) -> np.ndarray:
    """BGR uint8 HxWx3 via ``cv2.imdecode(IMREAD_COLOR | IMREAD_IGNORE_ORIENTATION)``."""
    import cv2

    try:
        img = cv2.imdecode(buf, cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
    except cv2.error as exc:
        raise SampleError(f"cannot decode with opencv: {str(exc).strip()}") from exc
    if img is None:
        raise SampleError("cannot decode with opencv: unknown format, corrupt or truncated data")
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise SampleError(f"cannot decode with opencv: unexpected result {img.dtype} {img.shape}")
    return img

"""``decode``: encoded file bytes -> HxWx3 uint8 image."""

from __future__ import annotations

import io
import struct
from typing import Annotated, Literal

import numpy as np
import PIL
from PIL import Image, ImageFile
from pydantic import Field

from repliscope.errors import OpSpecError, RepliscopeError, SampleError
from repliscope.ops.base import OPS, Channels, Item, OpParams, PreOp, StaticShape

DEFAULT_MAX_PIXELS = 89_478_485
"""Default ``max_pixels``: Pillow's own default ``Image.MAX_IMAGE_PIXELS`` (1 GiB / 4 bytes / 3 channels),
written out so that it does not depend on Pillow's process-global setting."""


class DecodeParams(OpParams):
    library: Literal["pillow", "opencv"]
    channels: Channels
    """Channel order of the output."""
    max_pixels: Annotated[int, Field(gt=0)] = DEFAULT_MAX_PIXELS
    """Largest width x height decoded; checked from the file header before any pixel is decoded."""


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

    Decompression bombs: for BOTH libraries the width and height are read from the header (Pillow's format
    plugins parse the header only) and an image over ``max_pixels`` (default :data:`DEFAULT_MAX_PIXELS`,
    Pillow's default limit; recorded with the op) is a SampleError before anything is decoded. Pillow's own
    process-global check (``Image.MAX_IMAGE_PIXELS``) is not used. Data whose header Pillow cannot read is
    refused for OpenCV too, since its size cannot be checked (e.g. OpenEXR, Radiance HDR).
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
        data = buf.tobytes()
        im = _open_header(data, self.params.library)
        try:
            check_pixels(im.size, self.params.max_pixels)
        except SampleError:
            im.close()
            raise
        if self.params.library == "pillow":
            rgb = _decode_pillow(im)
            out = rgb if self.params.channels == "RGB" else rgb[..., ::-1]
        else:
            im.close()
            bgr = _decode_opencv(buf)
            out = bgr if self.params.channels == "BGR" else bgr[..., ::-1]
        return Item(np.ascontiguousarray(out), layout="HWC", channels=self.params.channels)


def check_pixels(size: tuple[int, int], max_pixels: int) -> None:
    """SampleError when ``width x height`` (``size``) is over ``max_pixels``."""
    width, height = size
    if width * height > max_pixels:
        raise SampleError(f"image is {width}x{height} = {width * height:,} pixels, over the limit of "
                          f"{max_pixels:,} (decode.max_pixels)")


_NOT_THIS_FORMAT = (SyntaxError, IndexError, TypeError, struct.error)
"""What a Pillow format plugin raises for data that is not its format (as in ``Image.open``)."""


def _open_header(data: bytes, library: str) -> ImageFile.ImageFile:
    """The image with only its header parsed (size and mode known, no pixel decoded).

    This is ``Image.open``'s format detection (same plugin order, same accept/reject rules) WITHOUT its
    process-global decompression-bomb check, so that ``decode.max_pixels`` alone decides.
    """
    fp = io.BytesIO(data)
    prefix = data[:16]
    tried: set[str] = set()
    for loader in (Image.preinit, Image.init):
        loader()
        for fmt in list(Image.ID):
            if fmt in tried:
                continue
            tried.add(fmt)
            if fmt not in Image.OPEN:
                continue
            factory, accept = Image.OPEN[fmt]
            if accept is not None and (isinstance(ok := accept(prefix), str) or not ok):
                continue
            fp.seek(0)
            try:
                return factory(fp, "")
            except _NOT_THIS_FORMAT:
                continue
            except (OSError, ValueError, EOFError) as exc:
                raise SampleError(f"cannot decode with {library}: unreadable header "
                                  f"({str(exc) or type(exc).__name__})") from exc
    if library == "pillow":
        raise SampleError("cannot decode with pillow: cannot identify image file (unknown format or corrupt)")
    raise SampleError("cannot decode with opencv: unknown format or corrupt header (the size must be read from "
                      "the header with Pillow to check decode.max_pixels, so formats only OpenCV reads are refused)")


def _decode_pillow(im: ImageFile.ImageFile) -> np.ndarray:
    """RGB uint8 HxWx3 from an opened (header-only) Pillow image; see :class:`Decode` for the conversions."""
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        raise RepliscopeError(
            "cannot decode: PIL.ImageFile.LOAD_TRUNCATED_IMAGES is True, which pads truncated files"
        )
    try:
        with im:
            im.load()
            return _pillow_to_rgb(im)
    except SampleError:
        raise
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

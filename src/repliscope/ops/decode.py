"""``decode``: encoded file bytes -> HxWx3 uint8 image (Pillow, OpenCV, libjpeg-turbo or TensorFlow)."""

from __future__ import annotations

import io
import math
import re
import struct
from typing import Annotated, Any, Literal

import numpy as np
import PIL
from PIL import Image, ImageFile
from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from repliscope.errors import OpSpecError, RepliscopeError, SampleError
from repliscope.limits import MAX_PIXELS
from repliscope.ops._common import tensorflow
from repliscope.ops.base import OPS, Channels, Geometry, Item, OpParams, PreOp, StaticShape

DEFAULT_MAX_PIXELS = 89_478_485
"""Default ``max_pixels``: Pillow's own default ``Image.MAX_IMAGE_PIXELS`` (1 GiB / 4 bytes / 3 channels),
written out so that it does not depend on Pillow's process-global setting."""


LIBJPEG_ONLY = ("dct_scale_to", "fancy_upsampling", "dct_method")
"""Parameters that library ``libjpeg_turbo`` requires and the other libraries refuse."""

LIBJPEG_FORMATS = ("JPEG", "PNG", "GIF", "BMP")
"""Formats library ``libjpeg_turbo`` accepts: MLModelScope's decoders (rai-project/image ``getDecoder``)."""


class DecodeParams(OpParams):
    library: Literal["pillow", "opencv", "libjpeg_turbo", "tensorflow"]
    channels: Channels
    """Channel order of the output."""
    max_pixels: Annotated[int, Field(gt=0)] = DEFAULT_MAX_PIXELS
    """Largest width x height decoded; checked from the file header before any pixel is decoded."""
    dct_scale_to: Annotated[list[Annotated[int, Field(gt=0)]], Field(min_length=2, max_length=2)] | None = None
    """libjpeg_turbo only (required): [height, width] target of the DCT-domain downscale, or null for none.
    The three libjpeg_turbo parameters must be absent or null for the other libraries."""
    fancy_upsampling: bool | None = None
    """libjpeg_turbo only (required): libjpeg's ``do_fancy_upsampling`` (false: chroma is replicated)."""
    dct_method: Literal["islow", "ifast"] | None = None
    """libjpeg_turbo only (required): libjpeg's inverse DCT, ``JDCT_ISLOW`` or ``JDCT_IFAST``."""

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The libjpeg_turbo parameters appear (in describe(), repr, dumps) only for that library."""
        data: dict[str, Any] = handler(self)
        if self.library != "libjpeg_turbo":
            for key in LIBJPEG_ONLY:
                data.pop(key, None)
        return data


@OPS.register("decode")
class Decode(PreOp):
    """Decode encoded image bytes with Pillow, OpenCV, libjpeg-turbo or TensorFlow.

    In: 1-D uint8 array of file bytes, layout ``encoded``. Out: HxWx3 uint8, layout ``HWC``, ``channels``
    as requested, ``geometry`` the identity on the decoded (H, W) (boxes map back to this image). The file
    format is sniffed from the content (a PNG named ``.jpg`` decodes fine); only the first frame of a
    multi-frame file is used.

    Conversions to 3 channels, all explicit:

    - grayscale, palette, 1-bit, CMYK and YCbCr become RGB (Pillow ``convert("RGB")``; OpenCV
      ``IMREAD_COLOR``). CMYK JPEGs differ by about one level between the two libraries.
    - alpha (LA, PA, RGBA, palette transparency) is DROPPED, not composited over a background.
    - 16-bit samples become 8-bit as the declared library does it: OpenCV's ``IMREAD_COLOR`` keeps the high
      byte (``x >> 8``); Pillow opens 16-bit RGB as 8-bit (high byte) and its ``convert("RGB")`` CLIPS 16-bit
      (and 32-bit integer) gray at 255, which the pillow path reproduces (the path of timm and torchvision
      datasets, ``Image.open(f).convert("RGB")``).

    EXIF orientation is NOT applied by either library (Pillow never applies it; OpenCV is called with
    ``IMREAD_IGNORE_ORIENTATION``, unlike ``cv2.imread``'s default), matching common evaluation code.

    Empty, corrupt or truncated data raises :class:`SampleError`; truncated files are never padded
    (Pillow's ``ImageFile.LOAD_TRUNCATED_IMAGES`` must stay False).

    Decompression bombs: for BOTH libraries the width and height are read from the header (Pillow's format
    plugins parse the header only) and an image over ``max_pixels`` (default :data:`DEFAULT_MAX_PIXELS`,
    Pillow's default limit; recorded with the op) is a SampleError before anything is decoded. Pillow's own
    process-global check (``Image.MAX_IMAGE_PIXELS``) is not used. Data whose header Pillow cannot read is
    refused for OpenCV too, since its size cannot be checked (e.g. OpenEXR, Radiance HDR).

    ``library: tensorflow`` is ``tf.io.decode_image(data, channels=3, expand_animations=False)`` (uint8), the
    TF Model Garden's decode: TensorFlow's own libjpeg-turbo with ``JDCT_IFAST`` and fancy upsampling, which equals
    ``library: libjpeg_turbo`` with ``dct_method: ifast``, ``fancy_upsampling: true``, ``dct_scale_to: null`` bit
    for bit and differs from OpenCV's ``JDCT_ISLOW`` decode by up to 23 grey levels (158 coco-val-mini images,
    median of the per-image maxima 16; ``tests/ops/test_tensorflow_ops.py``). Output RGB (BGR flipped);
    grayscale replicated, alpha dropped; 16-bit PNG reduced to 8 bits by TF's ``convert_image_dtype``
    (``x // 256``, the high byte, like OpenCV); only the first frame of a GIF. TF decodes JPEG, PNG, GIF, BMP and
    WebP; other formats whose header Pillow reads (for ``max_pixels``) are a SampleError naming TF's reason.

    ``library: libjpeg_turbo`` reproduces a libjpeg decode with explicit decoder settings (as MLModelScope's
    rai-project/image + go-libjpeg ran it), through ``simplejpeg`` (bundles libjpeg-turbo; extra ``jpeg``).
    It requires, and only it accepts:

    - ``dct_scale_to``: ``[H, W]`` or null. With a target, the smallest M in 1..7 with
      ``ceil(M * width / 8) >= W`` and ``ceil(M * height / 8) >= H`` decodes at ``scale_num/scale_denom =
      M/8`` (DCT-domain downscaling, output ``ceil(M * size / 8)``); when no M < 8 fits, or with null, the
      image is decoded at full size. The output is NOT resized to ``[H, W]``: a ``resize`` op follows.
    - ``fancy_upsampling``: libjpeg's ``do_fancy_upsampling`` (false = chroma replicated, "merged" upsampling).
    - ``dct_method``: ``islow`` (``JDCT_ISLOW``, libjpeg's default) or ``ifast``.

    Colour: libjpeg's RGB output (grayscale replicated); BGR is that flipped. CMYK/YCCK JPEGs are refused
    (libjpeg cannot convert them to RGB: MLModelScope's decode failed on them). Formats other than JPEG are
    what MLModelScope decoded with Go's standard decoders: PNG, GIF and BMP are decoded with Pillow (the
    faithful choice: both are exact lossless decoders; conversions as for ``pillow`` above), any other
    format is a SampleError as it was there ("format ... is not supported"). ``max_pixels`` is checked on
    the full (unscaled) header size.
    """

    def __init__(self, params: DecodeParams) -> None:
        super().__init__(params)
        given = params.model_fields_set
        if params.library == "libjpeg_turbo":
            needs = {
                "dct_scale_to": ("[height, width] or null (no DCT scaling)", None),
                "fancy_upsampling": ("true or false", ["false", "true"]),
                "dct_method": ("islow or ifast", ["ifast", "islow"]),
            }
            for key, (what, allowed) in needs.items():
                if key not in given:
                    raise OpSpecError(key, f"library libjpeg_turbo needs {key}: {what}", allowed)
                if key != "dct_scale_to" and getattr(params, key) is None:
                    raise OpSpecError(key, f"library libjpeg_turbo needs {key}: {what}, not null", allowed)
        else:  # null is accepted (a parameter dump of a pillow/opencv decode carries them as null)
            for key in LIBJPEG_ONLY:
                if getattr(params, key) is not None:
                    raise OpSpecError(key, f"only applies to library libjpeg_turbo, not {params.library}; remove it")

    name = "decode"
    Params = DecodeParams
    params: DecodeParams

    def library(self) -> tuple[str, str]:
        if self.params.library == "pillow":
            return "pillow", PIL.__version__
        if self.params.library == "libjpeg_turbo":
            import simplejpeg

            return "libjpeg_turbo", f"simplejpeg {simplejpeg.__version__}"
        if self.params.library == "tensorflow":
            return "tensorflow", tensorflow().__version__
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
            check_pixels(im.size, min(self.params.max_pixels, MAX_PIXELS.value))
        except SampleError:
            im.close()
            raise
        file_hw = (im.size[1], im.size[0])
        dct_scale = 1.0
        if self.params.library == "pillow":
            rgb = _decode_pillow(im)
            out = rgb if self.params.channels == "RGB" else rgb[..., ::-1]
        elif self.params.library == "libjpeg_turbo":
            rgb, dct_scale = self._decode_libjpeg(im, data)
            out = rgb if self.params.channels == "RGB" else rgb[..., ::-1]
        elif self.params.library == "tensorflow":
            im.close()
            rgb = _decode_tensorflow(data)
            out = rgb if self.params.channels == "RGB" else rgb[..., ::-1]
        else:
            im.close()
            bgr = _decode_opencv(buf)
            out = bgr if self.params.channels == "BGR" else bgr[..., ::-1]
        # the source of the geometry is the FILE's pixel grid (where annotations live): a DCT-domain downscale
        # by M/8 maps every 8-pixel block to M pixels, so it is a scale of M/8 on both axes
        geometry = Geometry(source_hw=file_hw)
        if dct_scale != 1.0:
            geometry = geometry.then((dct_scale, dct_scale))
        return Item(np.ascontiguousarray(out), layout="HWC", channels=self.params.channels, geometry=geometry)

    def _decode_libjpeg(self, im: ImageFile.ImageFile, data: bytes) -> tuple[np.ndarray, float]:
        """(RGB uint8 HxWx3, the DCT scale M/8 applied: 1.0 for none) for ``library: libjpeg_turbo``; see
        :class:`Decode`."""
        fmt = im.format
        if fmt != "JPEG":
            if fmt not in LIBJPEG_FORMATS:
                im.close()
                raise SampleError(
                    f"cannot decode with libjpeg_turbo: format {fmt} is not supported "
                    f"(MLModelScope decoded only {', '.join(LIBJPEG_FORMATS)})"
                )
            return _decode_pillow(im), 1.0
        im.close()
        import simplejpeg

        p = self.params
        try:
            height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
            check_pixels((width, height), min(p.max_pixels, MAX_PIXELS.value))
            if colorspace in ("CMYK", "YCCK"):
                raise SampleError(
                    f"cannot decode with libjpeg_turbo: a {colorspace} JPEG (libjpeg cannot convert it to RGB)"
                )
            scale = {}
            m = 8
            if p.dct_scale_to is not None:
                m = dct_scale_numerator((width, height), (p.dct_scale_to[1], p.dct_scale_to[0]))
                # ask for the exact M/8 size (simplejpeg takes the smallest factor reaching it); passing the
                # target itself differs when one target side exceeds the image (simplejpeg still scales)
                if m < 8:
                    scale = {"min_width": math.ceil(m * width / 8), "min_height": math.ceil(m * height / 8)}
            rgb = simplejpeg.decode_jpeg(
                data,
                colorspace="RGB",
                fastdct=p.dct_method == "ifast",
                fastupsample=not p.fancy_upsampling,
                strict=True,
                **scale,
            )
        except ValueError as exc:
            raise SampleError(f"cannot decode with libjpeg_turbo: {exc}") from exc
        return np.asarray(rgb, dtype=np.uint8), (m / 8 if scale else 1.0)


def dct_scale_numerator(size: tuple[int, int], target: tuple[int, int]) -> int:
    """M of libjpeg's ``scale_num = M, scale_denom = 8`` for an image of ``size`` (width, height) bound for
    ``target`` (width, height): the smallest M in 1..7 with ``ceil(M * side / 8) >= target side`` for both
    sides, else 8 (no scaling). This is rai-project/go-libjpeg's ``setupDecoderOptions``."""
    (width, height), (tw, th) = size, target
    for m in range(1, 8):
        if (m * width + 7) // 8 >= tw and (m * height + 7) // 8 >= th:
            return m
    return 8


def check_pixels(size: tuple[int, int], max_pixels: int) -> None:
    """SampleError when ``width x height`` (``size``) is over ``max_pixels``."""
    width, height = size
    if width * height > max_pixels:
        raise SampleError(
            f"image is {width}x{height} = {width * height:,} pixels, over the limit of "
            f"{max_pixels:,} (decode.max_pixels)"
        )


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
                raise SampleError(
                    f"cannot decode with {library}: unreadable header ({str(exc) or type(exc).__name__})"
                ) from exc
    if library == "pillow":
        raise SampleError("cannot decode with pillow: cannot identify image file (unknown format or corrupt)")
    raise SampleError(
        "cannot decode with opencv: unknown format or corrupt header (the size must be read from "
        "the header with Pillow to check decode.max_pixels, so formats only OpenCV reads are refused)"
    )


def _decode_pillow(im: ImageFile.ImageFile) -> np.ndarray:
    """RGB uint8 HxWx3 from an opened (header-only) Pillow image; see :class:`Decode` for the conversions."""
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        raise RepliscopeError("cannot decode: PIL.ImageFile.LOAD_TRUNCATED_IMAGES is True, which pads truncated files")
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
        gray = np.clip(raw, 0, 255).astype(np.uint8)  # Pillow's convert("RGB") of I;16 / I: clipped at 255
        return np.repeat(gray[..., None], 3, axis=-1)
    if im.mode in ("F",) or im.mode.startswith("I;"):
        raise SampleError(f"cannot decode: unsupported pixel mode {im.mode}")
    return np.asarray(im.convert("RGB"), dtype=np.uint8)


def _decode_tensorflow(data: bytes) -> np.ndarray:
    """RGB uint8 HxWx3 via ``tf.io.decode_image(data, channels=3, expand_animations=False)``."""
    tf = tensorflow()
    try:
        img = tf.io.decode_image(data, channels=3, dtype=tf.uint8, expand_animations=False).numpy()
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError) as exc:
        # TF's message names its graph node ("{{function_node ...}} Invalid PNG. ... [Op:DecodeImage]")
        reason = re.sub(r"\{\{.*?\}\}|\[Op:\w+\]", "", str(exc.message))
        reason = " ".join(reason.split())
        raise SampleError(f"cannot decode with tensorflow: {reason}") from exc
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise SampleError(f"cannot decode with tensorflow: unexpected result {img.dtype} {img.shape}")
    return np.ascontiguousarray(img)


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

"""decode: every pixel format becomes HxWx3 uint8 with the expected values; bad data is a SampleError."""

from __future__ import annotations

import io
import resource
import struct
import zlib
from functools import cache

import numpy as np
import PIL
import pytest
from PIL import Image, ImageFile

from repliscope.errors import OpSpecError, SampleError
from repliscope.ops import decode_input
from repliscope.ops.decode import DEFAULT_MAX_PIXELS
from tests.ops._helpers import check_pre_op, encode, pre, smooth_rgb

LIBS = ["pillow", "opencv"]


def decode(data: bytes, library: str, channels: str = "RGB") -> np.ndarray:
    out = check_pre_op(
        pre(op="decode", library=library, channels=channels), decode_input(data), keep_layout=False, keep_channels=False
    )
    assert out.layout == "HWC"
    assert out.channels == channels
    assert out.data.dtype == np.uint8
    assert out.data.ndim == 3 and out.data.shape[2] == 3
    return out.data


def palette_image() -> Image.Image:
    im = Image.new("P", (4, 2))
    im.putpalette([0, 0, 0, 10, 20, 30, 200, 100, 50] + [0] * 759)
    im.putpixel((1, 0), 1)
    im.putpixel((2, 0), 2)
    return im


@pytest.mark.parametrize("library", LIBS)
class TestFormats:
    def test_rgb_png_exact_and_channel_order(self, library: str) -> None:
        img = smooth_rgb(5, 7)
        data = encode(Image.fromarray(img), "PNG")
        np.testing.assert_array_equal(decode(data, library, "RGB"), img)
        np.testing.assert_array_equal(decode(data, library, "BGR"), img[..., ::-1])

    def test_grayscale(self, library: str) -> None:
        data = encode(Image.new("L", (4, 3), 99), "PNG")
        out = decode(data, library)
        assert out.shape == (3, 4, 3)
        assert (out == 99).all()

    def test_one_bit(self, library: str) -> None:
        assert (decode(encode(Image.new("1", (4, 2), 1), "PNG"), library) == 255).all()

    def test_palette(self, library: str) -> None:
        out = decode(encode(palette_image(), "PNG"), library)
        np.testing.assert_array_equal(out[0], [[0, 0, 0], [10, 20, 30], [200, 100, 50], [0, 0, 0]])

    def test_palette_with_transparency_drops_alpha(self, library: str) -> None:
        out = decode(encode(palette_image(), "PNG", transparency=1), library)
        np.testing.assert_array_equal(out[0, 1], [10, 20, 30])

    @pytest.mark.parametrize(
        ("mode", "color", "expected"),
        [
            ("RGBA", (1, 2, 3, 0), (1, 2, 3)),
            ("RGBA", (250, 128, 7, 128), (250, 128, 7)),
            ("LA", (77, 10), (77, 77, 77)),
        ],
    )
    def test_alpha_is_dropped_not_composited(
        self, library: str, mode: str, color: tuple[int, ...], expected: tuple[int, ...]
    ) -> None:
        out = decode(encode(Image.new(mode, (4, 2), color), "PNG"), library)
        assert (out == np.array(expected, dtype=np.uint8)).all()

    @pytest.mark.parametrize("fmt", ["JPEG", "TIFF"])
    def test_cmyk(self, library: str, fmt: str) -> None:
        out = decode(encode(Image.new("CMYK", (8, 8), (0, 255, 255, 0)), fmt), library)
        # pure red; the two libraries' CMYK JPEG conversions differ by about one level
        assert np.abs(out.astype(int) - [255, 0, 0]).max() <= 1

    def test_gray16_png_follows_the_library(self, library: str) -> None:
        values = np.array([[0, 255, 256, 32767, 32768, 65535, 65280, 383]], dtype=np.uint16)
        data = encode(Image.fromarray(values), "PNG")
        assert Image.open(io.BytesIO(data)).mode.startswith("I;16")
        out = decode(data, library)
        # OpenCV keeps the high byte; Pillow's convert("RGB") clips at 255 (timm's and torchvision's path)
        expected = (np.minimum(values, 255) if library == "pillow" else values >> 8).astype(np.uint8)
        if library == "pillow":
            np.testing.assert_array_equal(out, np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
        for c in range(3):
            np.testing.assert_array_equal(out[..., c], expected)

    def test_rgb16_png_keeps_high_byte(self, library: str) -> None:
        import cv2

        v = np.array([[0, 255, 256, 32767, 32768, 65535, 65280, 383]], dtype=np.uint16)
        rgb = np.stack([v, v[:, ::-1], v // 3], axis=-1)
        ok, png = cv2.imencode(".png", rgb[..., ::-1])  # cv2 writes BGR
        assert ok
        np.testing.assert_array_equal(decode(png.tobytes(), library), (rgb >> 8).astype(np.uint8))

    def test_png_named_jpeg_decodes(self, library: str) -> None:
        """Decoders sniff the content; a PNG in a ``.jpg`` file decodes (bytes carry no name)."""
        img = smooth_rgb(6, 6)
        np.testing.assert_array_equal(decode(encode(Image.fromarray(img), "PNG"), library), img)

    def test_exif_orientation_is_not_applied(self, library: str) -> None:
        img = smooth_rgb(4, 6)
        exif = Image.Exif()
        exif[0x0112] = 6  # "rotate 90 CW" - would swap height and width if applied
        data = encode(Image.fromarray(img), "JPEG", quality=95, exif=exif.tobytes())
        assert decode(data, library).shape == (4, 6, 3)


@pytest.mark.parametrize("quality", [75, 95])
def test_pillow_and_opencv_jpeg_agree_within_two_levels(quality: int) -> None:
    """Measured: identical (max 0) with Pillow 13 / OpenCV 5 (both libjpeg-turbo); bound 2 levels."""
    data = encode(Image.fromarray(smooth_rgb(97, 131)), "JPEG", quality=quality)
    diff = np.abs(decode(data, "pillow").astype(int) - decode(data, "opencv").astype(int))
    assert diff.max() <= 2


@pytest.mark.parametrize("library", LIBS)
class TestBadData:
    def jpeg(self) -> bytes:
        return encode(Image.fromarray(smooth_rgb(60, 80)), "JPEG", quality=90)

    @pytest.mark.parametrize("keep", [0.5, 0.99])
    def test_truncated_jpeg(self, library: str, keep: float) -> None:
        data = self.jpeg()
        with pytest.raises(SampleError, match="cannot decode"):
            decode(data[: int(len(data) * keep)], library)

    def test_truncated_jpeg_missing_only_end_marker(self, library: str) -> None:
        data = self.jpeg()
        with pytest.raises(SampleError, match="cannot decode"):
            decode(data[:-2], library)

    def test_truncated_png(self, library: str) -> None:
        data = encode(Image.fromarray(smooth_rgb(60, 80)), "PNG")
        with pytest.raises(SampleError, match="cannot decode"):
            decode(data[: len(data) // 2], library)

    def test_garbage(self, library: str) -> None:
        with pytest.raises(SampleError, match="cannot decode"):
            decode(b"this is not an image" * 10, library)

    def test_empty(self, library: str) -> None:
        with pytest.raises(SampleError, match="empty"):
            decode(b"", library)


def test_pillow_truncated_message_says_truncated() -> None:
    data = encode(Image.fromarray(smooth_rgb(60, 80)), "JPEG")
    with pytest.raises(SampleError, match="truncated"):
        decode(data[: len(data) // 2], "pillow")


def test_truncated_images_are_not_padded_globally() -> None:
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False


def test_decode_needs_encoded_input() -> None:
    from tests.ops._helpers import hwc_item

    with pytest.raises(OpSpecError, match="encoded"):
        pre(op="decode", library="pillow", channels="RGB")(hwc_item(smooth_rgb(2, 2)))


def test_library_version_is_recorded() -> None:
    import cv2

    d = pre(op="decode", library="opencv", channels="BGR").describe()
    assert d == {
        "op": "decode",
        "library": "opencv",
        "channels": "BGR",
        "max_pixels": 89_478_485,
        "library_version": cv2.__version__,
    }


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


@cache
def bomb_png(side: int = 30_000) -> bytes:
    """A valid side x side 1-bit grayscale PNG of zeros (~110 KB for 30000): written chunk by chunk, the
    image itself is never allocated. Decoded to HxWx3 uint8 it would need side*side*3 bytes (2.7 GB)."""
    row = bytes(1 + (side + 7) // 8)  # filter byte 0 + packed bits
    z = zlib.compressobj(9)
    parts = [z.compress(row) for _ in range(side)]
    idat = b"".join(parts) + z.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def _max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def test_generated_png_is_a_valid_30000_square_image() -> None:
    from PIL import PngImagePlugin

    data = bomb_png()
    assert len(data) < 1_000_000
    with PngImagePlugin.PngImageFile(io.BytesIO(data)) as im:  # header only (Image.open would refuse it)
        assert im.size == (30_000, 30_000) and im.mode == "1"
    small = bomb_png(20)  # the same writer at a decodable size gives a real, all-black image
    for library in LIBS:
        np.testing.assert_array_equal(decode(small, library), np.zeros((20, 20, 3), np.uint8))


@pytest.mark.parametrize("library", LIBS)
class TestDecompressionBomb:
    def test_refused_from_the_header_fast_and_without_memory(self, library: str) -> None:
        data = bomb_png()
        rss = _max_rss_bytes()
        with pytest.raises(SampleError) as info:
            decode(data, library)
        assert _max_rss_bytes() - rss < 100_000_000  # decoding would need 2.7 GB
        assert str(info.value) == (
            "image is 30000x30000 = 900,000,000 pixels, over the limit of 89,478,485 (decode.max_pixels)"
        )

    def test_limit_is_inclusive_and_configurable(self, library: str) -> None:
        data = encode(Image.fromarray(smooth_rgb(30, 40)), "PNG")
        op_ok = pre(op="decode", library=library, channels="RGB", max_pixels=1200)
        assert op_ok(decode_input(data)).data.shape == (30, 40, 3)
        op_small = pre(op="decode", library=library, channels="RGB", max_pixels=1199)
        with pytest.raises(
            SampleError,
            match=r"^image is 40x30 = 1,200 pixels, over the limit of 1,199 "
            r"\(decode.max_pixels\)$",
        ):
            op_small(decode_input(data))

    def test_independent_of_pillows_global_limit(self, library: str, monkeypatch: pytest.MonkeyPatch) -> None:
        data = encode(Image.fromarray(smooth_rgb(30, 40)), "PNG")
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10)  # Pillow's Image.open would refuse 1,200 pixels
        np.testing.assert_array_equal(decode(data, library), smooth_rgb(30, 40))
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # ... and would accept any size
        with pytest.raises(SampleError, match="over the limit of 89,478,485"):
            decode(bomb_png(), library)


def test_default_is_pillows_default_limit() -> None:
    assert DEFAULT_MAX_PIXELS == 1024**3 // 4 // 3  # Pillow: 1 GiB / 4 bytes per pixel / 3 channels


@pytest.mark.parametrize("value", [0, -1, 1.5, "89478485"])
def test_max_pixels_must_be_a_positive_int(value: object) -> None:
    with pytest.raises(OpSpecError, match="max_pixels"):
        pre(op="decode", library="pillow", channels="RGB", max_pixels=value)


def test_opencv_refuses_a_format_whose_size_pillow_cannot_read() -> None:
    import cv2

    ok, hdr = cv2.imencode(".hdr", np.ones((4, 5, 3), np.float32))
    assert ok and cv2.imdecode(hdr, cv2.IMREAD_COLOR) is not None  # OpenCV alone would decode it
    with pytest.raises(
        SampleError,
        match=r"^cannot decode with opencv: unknown format or corrupt header \(the size "
        r"must be read from the header with Pillow to check decode.max_pixels",
    ):
        decode(hdr.tobytes(), "opencv")


def test_pillow_unknown_format_message() -> None:
    with pytest.raises(
        SampleError,
        match=r"^cannot decode with pillow: cannot identify image file \(unknown "
        r"format or corrupt\)$",
    ):
        decode(b"this is not an image" * 10, "pillow")


# --- library libjpeg_turbo: MLModelScope's libjpeg decode (rai-project/image + go-libjpeg) ---

LJ_SETTINGS = {"dct_scale_to": [224, 224], "fancy_upsampling": False, "dct_method": "islow"}


def ljpeg(data: bytes, channels: str = "RGB", **settings: object) -> np.ndarray:
    spec = {"op": "decode", "library": "libjpeg_turbo", "channels": channels, **LJ_SETTINGS, **settings}
    out = check_pre_op(pre(**spec), decode_input(data), keep_layout=False, keep_channels=False)
    assert out.layout == "HWC" and out.channels == channels and out.data.dtype == np.uint8
    return out.data


@cache
def photo_jpeg(width: int = 500, height: int = 375) -> bytes:
    """A noisy gradient saved as JPEG quality 90 with 4:2:0 chroma subsampling (as most photos)."""
    return encode(Image.fromarray(smooth_rgb(height, width)), "JPEG", quality=90, subsampling=2)


def pillow_rgb(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


@pytest.mark.parametrize(
    ("size", "target", "expected"),
    [
        ((500, 375), (224, 224), (313, 235)),  # M = 5: ceil(5*500/8) = 313, ceil(5*375/8) = 235
        ((500, 375), (250, 188), (250, 188)),  # M = 4 exactly reaches the target
        ((500, 375), (250, 189), (313, 235)),  # one row more needs M = 5
        ((500, 375), (63, 47), (63, 47)),  # M = 1
        ((500, 375), (1, 1), (63, 47)),  # never below 1/8
        ((500, 375), (438, 329), (438, 329)),  # M = 7
        ((500, 375), (439, 329), (500, 375)),  # no M < 8 fits: full size
        ((500, 375), (10, 330), (500, 375)),  # one side decides
        ((100, 80), (224, 224), (100, 80)),  # smaller than the target: full size, never upscaled
        ((7, 7), (6, 6), (6, 6)),  # M = 6 (ceil(5*7/8) = 5 < 6)
    ],
)
def test_dct_scaled_size_follows_go_libjpeg_rule(
    size: tuple[int, int], target: tuple[int, int], expected: tuple[int, int]
) -> None:
    (w, h), (tw, th), (ew, eh) = size, target, expected
    assert ljpeg(photo_jpeg(w, h), dct_scale_to=[th, tw]).shape == (eh, ew, 3)


def test_dct_scale_numerator_over_many_sizes() -> None:
    """The rule against a brute-force reading of setupDecoderOptions, and the decoder's size against it."""
    from repliscope.ops.decode import dct_scale_numerator

    assert dct_scale_numerator((500, 375), (224, 224)) == 5
    rng = np.random.default_rng(0)
    for w, h, tw, th in rng.integers(1, 120, size=(40, 4)):
        m = dct_scale_numerator((int(w), int(h)), (int(tw), int(th)))
        fits = [k for k in range(1, 8) if -(-k * w // 8) >= tw and -(-k * h // 8) >= th]
        assert m == (fits[0] if fits else 8)
        eh, ew = (-(-m * h // 8), -(-m * w // 8)) if m < 8 else (h, w)
        assert ljpeg(photo_jpeg(int(w), int(h)), dct_scale_to=[int(th), int(tw)]).shape == (eh, ew, 3)


def test_no_dct_scaling_with_null_target() -> None:
    assert ljpeg(photo_jpeg(), dct_scale_to=None).shape == (375, 500, 3)


def test_fancy_upsampling_without_scaling_equals_pillow_bit_for_bit() -> None:
    """Pillow decodes with libjpeg-turbo, ISLOW, fancy upsampling: the same decoder settings."""
    data = photo_jpeg()
    np.testing.assert_array_equal(ljpeg(data, dct_scale_to=None, fancy_upsampling=True), pillow_rgb(data))


def test_non_fancy_upsampling_differs_from_pillow() -> None:
    data = photo_jpeg()
    diff = np.abs(ljpeg(data, dct_scale_to=None).astype(int) - pillow_rgb(data).astype(int))
    assert 0.3 < (diff > 0).mean() < 0.7  # measured 0.50 of the values on this noisy 4:2:0 image
    assert diff.max() > 20  # chroma replicated instead of interpolated


def test_ifast_differs_from_islow() -> None:
    data = photo_jpeg()
    a = ljpeg(data, dct_scale_to=None).astype(int)
    b = ljpeg(data, dct_scale_to=None, dct_method="ifast").astype(int)
    assert 0 < np.abs(a - b).max() <= 8  # measured 5


def test_bgr_is_rgb_flipped() -> None:
    data = photo_jpeg()
    np.testing.assert_array_equal(ljpeg(data, "BGR"), ljpeg(data, "RGB")[..., ::-1])


def test_grayscale_jpeg_is_replicated() -> None:
    data = encode(Image.new("L", (16, 8), 99), "JPEG", quality=95)
    out = ljpeg(data, dct_scale_to=None)
    assert out.shape == (8, 16, 3) and (out == 99).all()


def test_cmyk_jpeg_is_refused_like_libjpeg() -> None:
    data = encode(Image.new("CMYK", (8, 8), (0, 255, 255, 0)), "JPEG")
    with pytest.raises(
        SampleError,
        match=r"^cannot decode with libjpeg_turbo: a CMYK JPEG \(libjpeg cannot "
        r"convert it to RGB\)$",
    ):
        ljpeg(data)


@pytest.mark.parametrize("fmt", ["PNG", "GIF", "BMP"])
def test_go_standard_formats_are_decoded_with_pillow(fmt: str) -> None:
    img = smooth_rgb(30, 40)
    im = Image.fromarray(img)
    if fmt == "GIF":
        im = im.quantize(64)
    data = encode(im, fmt)
    expected = pillow_rgb(data)
    if fmt != "GIF":
        np.testing.assert_array_equal(expected, img)
    out = ljpeg(data)  # dct_scale_to does not apply: not a JPEG
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(out, decode(data, "pillow"))


def test_other_formats_are_refused_as_mlmodelscope_did() -> None:
    data = encode(Image.fromarray(smooth_rgb(8, 8)), "TIFF")
    with pytest.raises(
        SampleError,
        match=r"^cannot decode with libjpeg_turbo: format TIFF is not supported "
        r"\(MLModelScope decoded only JPEG, PNG, GIF, BMP\)$",
    ):
        ljpeg(data)


def test_libjpeg_max_pixels_refusal() -> None:
    data = photo_jpeg(40, 30)
    assert ljpeg(data, max_pixels=1200, dct_scale_to=None).shape == (30, 40, 3)
    with pytest.raises(
        SampleError,
        match=r"^image is 40x30 = 1,200 pixels, over the limit of 1,199 "
        r"\(decode.max_pixels\)$",
    ):
        ljpeg(data, max_pixels=1199)  # the full size counts, not the DCT-scaled one
    with pytest.raises(SampleError, match="over the limit of 89,478,485"):
        ljpeg(bomb_png())


@pytest.mark.parametrize("keep", [0.5, 0.99])
def test_libjpeg_truncated_is_a_sample_error(keep: float) -> None:
    data = photo_jpeg(80, 60)
    with pytest.raises(SampleError, match=r"^cannot decode"):
        ljpeg(data[: int(len(data) * keep)])


def test_libjpeg_garbage_and_empty() -> None:
    with pytest.raises(SampleError, match="cannot decode"):
        ljpeg(b"\xff\xd8\xff" + b"not a jpeg" * 10)
    with pytest.raises(SampleError, match="empty"):
        ljpeg(b"")


def test_libjpeg_parameters_may_be_null_for_other_libraries() -> None:
    """A parameter dump of a pillow decode (pitfall variants rebuild ops from it) carries them as null."""
    d = pre(
        op="decode", library="pillow", channels="RGB", dct_scale_to=None, fancy_upsampling=None, dct_method=None
    ).describe()
    assert d == {
        "op": "decode",
        "library": "pillow",
        "channels": "RGB",
        "max_pixels": 89_478_485,
        "library_version": PIL.__version__,
    }


def test_libjpeg_describe_records_every_setting() -> None:
    import simplejpeg

    d = pre(op="decode", library="libjpeg_turbo", channels="BGR", **LJ_SETTINGS).describe()
    assert d == {
        "op": "decode",
        "library": "libjpeg_turbo",
        "channels": "BGR",
        "max_pixels": 89_478_485,
        "dct_scale_to": [224, 224],
        "fancy_upsampling": False,
        "dct_method": "islow",
        "library_version": f"simplejpeg {simplejpeg.__version__}",
    }


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"library": "pillow", "dct_method": "islow"},
            "dct_method: only applies to library libjpeg_turbo, not pillow; remove it",
        ),
        (
            {"library": "opencv", "dct_scale_to": [224, 224]},
            "dct_scale_to: only applies to library libjpeg_turbo, not opencv; remove it",
        ),
        (
            {"library": "pillow", "fancy_upsampling": True},
            "fancy_upsampling: only applies to library libjpeg_turbo, not pillow; remove it",
        ),
        (
            {"library": "libjpeg_turbo", "fancy_upsampling": False, "dct_method": "islow"},
            "dct_scale_to: library libjpeg_turbo needs dct_scale_to: [height, width] or null (no DCT scaling)",
        ),
        (
            {"library": "libjpeg_turbo", "dct_scale_to": None, "dct_method": "islow"},
            "fancy_upsampling: library libjpeg_turbo needs fancy_upsampling: true or false (allowed: false, true)",
        ),
        (
            {"library": "libjpeg_turbo", "dct_scale_to": None, "fancy_upsampling": False},
            "dct_method: library libjpeg_turbo needs dct_method: islow or ifast (allowed: ifast, islow)",
        ),
        (
            {"library": "libjpeg_turbo", "dct_scale_to": None, "fancy_upsampling": None, "dct_method": "islow"},
            "fancy_upsampling: library libjpeg_turbo needs fancy_upsampling: true or false, not null "
            "(allowed: false, true)",
        ),
    ],
)
def test_libjpeg_parameter_combinations(spec: dict[str, object], message: str) -> None:
    with pytest.raises(OpSpecError) as info:
        pre(op="decode", channels="RGB", **spec)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("key", "value"),
    [("dct_scale_to", [224]), ("dct_scale_to", [0, 224]), ("dct_method", "float"), ("fancy_upsampling", "no")],
)
def test_libjpeg_parameter_values(key: str, value: object) -> None:
    with pytest.raises(OpSpecError, match=key):
        pre(op="decode", library="libjpeg_turbo", channels="RGB", **{**LJ_SETTINGS, key: value})

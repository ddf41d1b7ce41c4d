"""``library: tensorflow`` for ``decode`` and ``resize`` (and ``letterbox``'s resampling): the TF Model Garden's
pre-processing (``tf.io.decode_image``, ``tf.image.resize``), each semantic pinned against an independent
reference (libjpeg-turbo through simplejpeg, OpenCV, torch, a numpy index rule), and how far TF's JPEG decode is
from OpenCV's on the real coco-val-mini images."""

from __future__ import annotations

import io
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from repliscope.errors import OpSpecError, SampleError
from repliscope.ops import Item
from repliscope.ops.pipeline import decode_input
from tests.ops._helpers import encode, hwc_item, pre, smooth_rgb

COCO_IMAGES = Path(__file__).resolve().parents[3] / "shared" / "data" / "coco-val-mini" / "images"


def _coco(n: int | None = None) -> list[Path]:
    if not COCO_IMAGES.is_dir():
        pytest.skip(f"{COCO_IMAGES} is absent (../shared/data)")
    files = sorted(COCO_IMAGES.glob("*.jpg"))
    return files if n is None else files[:n]


def _decode(data: bytes, library: str, channels: str = "RGB", **extra: object) -> Item:
    return pre(op="decode", library=library, channels=channels, **extra)(decode_input(data))


def test_tensorflow_decode_is_libjpeg_turbo_ifast_and_up_to_23_levels_from_opencv() -> None:
    """On every coco-val-mini image tf.io.decode_image equals libjpeg-turbo with JDCT_IFAST and fancy upsampling
    bit for bit, and OpenCV (JDCT_ISLOW) by at most 23 grey levels (median of the per-image maxima 16)."""
    files = _coco()
    worst: list[int] = []
    for path in files:
        data = path.read_bytes()
        tf_rgb = _decode(data, "tensorflow").data
        turbo = _decode(data, "libjpeg_turbo", dct_scale_to=None, fancy_upsampling=True, dct_method="ifast").data
        assert np.array_equal(tf_rgb, turbo), path.name
        cv_rgb = _decode(data, "opencv").data
        worst.append(int(np.abs(tf_rgb.astype(np.int16) - cv_rgb.astype(np.int16)).max()))
    assert len(files) == 158
    assert max(worst) == 23 and files[int(np.argmax(worst))].name == "000000530836.jpg"
    assert float(np.median(worst)) == 16.0
    assert min(worst) == 4  # no image decodes alike


def test_tensorflow_decode_bgr_geometry_and_provenance() -> None:
    data = _coco(1)[0].read_bytes()
    rgb, bgr = _decode(data, "tensorflow"), _decode(data, "tensorflow", "BGR")
    assert np.array_equal(bgr.data, rgb.data[..., ::-1]) and bgr.channels == "BGR"
    assert rgb.geometry is not None and rgb.geometry.source_hw == rgb.data.shape[:2]
    import tensorflow as tf

    assert pre(op="decode", library="tensorflow", channels="RGB").library() == ("tensorflow", tf.__version__)


def test_tensorflow_decode_png_conversions_match_opencv() -> None:
    """Gray replicated, alpha dropped (not composited), 16-bit reduced to its high byte: as OpenCV does."""
    img = smooth_rgb(40, 52, seed=3)
    rgba = np.dstack([img, np.full(img.shape[:2], 9, np.uint8)])
    for arr, mode in ((img[..., 0], "L"), (rgba, "RGBA")):
        data = encode(Image.fromarray(arr, mode), "PNG")
        assert np.array_equal(_decode(data, "tensorflow").data, _decode(data, "opencv").data), mode
    rgb16 = (np.arange(40 * 52 * 3, dtype=np.uint32).reshape(40, 52, 3) * 37 % 65536).astype(np.uint16)
    ok, buf = cv2.imencode(".png", rgb16[..., ::-1])
    assert ok
    out = _decode(buf.tobytes(), "tensorflow").data
    assert np.array_equal(out, (rgb16 >> 8).astype(np.uint8))


def test_tensorflow_decode_refuses_broken_data_with_tfs_reason() -> None:
    data = encode(Image.fromarray(smooth_rgb(64, 64)), "JPEG", quality=90)
    with pytest.raises(SampleError, match=r"^cannot decode with tensorflow: ") as info:
        _decode(data[: len(data) // 2], "tensorflow")
    assert "function_node" not in str(info.value) and "[Op:" not in str(info.value)
    tiff = io.BytesIO()
    Image.fromarray(smooth_rgb(8, 8)).save(tiff, "TIFF")
    with pytest.raises(SampleError, match=r"^cannot decode with tensorflow: .*(Unknown image file format|JPEG, PNG)"):
        _decode(tiff.getvalue(), "tensorflow")
    with pytest.raises(SampleError, match=r"over the limit of 100 \(decode.max_pixels\)"):
        _decode(data, "tensorflow", max_pixels=100)  # the header is checked before TF decodes


def _resize(x: np.ndarray, h: int, w: int, method: str, antialias: bool) -> np.ndarray:
    op = pre(
        op="resize", size=[h, w], keep_aspect_ratio=False, method=method, library="tensorflow", antialias=antialias
    )
    out = op(hwc_item(x))
    assert out.data.dtype == x.dtype and out.data.shape == (h, w, 3)
    return out.data


def _torch(x: np.ndarray, h: int, w: int, mode: str, antialias: bool = False) -> np.ndarray:
    t = torch.from_numpy(np.ascontiguousarray(x)).permute(2, 0, 1)[None]
    kwargs = {"align_corners": False, "antialias": antialias} if mode in ("bilinear", "bicubic") else {}
    return torch.nn.functional.interpolate(t, size=(h, w), mode=mode, **kwargs)[0].permute(1, 2, 0).numpy()


@pytest.mark.parametrize("size", [(276, 416), (285, 427), (463, 693)])
def test_tensorflow_resize_methods_against_independent_references(size: tuple[int, int]) -> None:
    """On a real 426 x 640 photo (values 0-255, float32): bilinear = OpenCV's INTER_LINEAR and torch's bilinear
    (half-pixel centres), area = OpenCV's INTER_AREA, antialiased bilinear = torch's antialiased bilinear when
    downscaling; nearest = floor((i + 0.5) * in / out) in float32, on the uint8 image."""
    bgr = cv2.imread(str(_coco(1)[0]))
    assert bgr is not None and bgr.shape == (426, 640, 3)
    u = bgr[..., ::-1].copy()
    x = u.astype(np.float32)
    h, w = size
    bilinear = _resize(x, h, w, "bilinear", False)
    assert np.abs(bilinear - cv2.resize(x, (w, h), interpolation=cv2.INTER_LINEAR)).max() < 8e-3
    assert np.abs(bilinear - _torch(x, h, w, "bilinear")).max() < 4e-3
    area = _resize(x, h, w, "area", True)
    assert np.abs(area - cv2.resize(x, (w, h), interpolation=cv2.INTER_AREA)).max() < 2e-2
    if h < 426:
        assert np.abs(_resize(x, h, w, "bilinear", True) - _torch(x, h, w, "bilinear", True)).max() < 2e-4
        # area is not pooling over a rounded window (torch's adaptive average) when the scale is not an integer
        assert np.abs(area - _torch(x, h, w, "area")).max() > 10
    else:
        pil = np.stack(
            [np.asarray(Image.fromarray(x[..., c]).resize((w, h), Image.Resampling.BICUBIC)) for c in range(3)], -1
        )
        assert np.abs(_resize(x, h, w, "bicubic", False) - pil).max() < 0.13  # Keys a = -0.5
    assert np.abs(_resize(x, h, w, "bicubic", False) - _torch(x, h, w, "bicubic")).max() > 5  # torch: a = -0.75
    f32 = np.float32
    rows = np.minimum(np.floor((np.arange(h, dtype=f32) + f32(0.5)) * (f32(426) / f32(h))).astype(int), 425)
    cols = np.minimum(np.floor((np.arange(w, dtype=f32) + f32(0.5)) * (f32(640) / f32(w))).astype(int), 639)
    assert np.array_equal(_resize(u, h, w, "nearest", False), u[rows[:, None], cols[None, :]])


def test_tensorflow_resize_rules() -> None:
    with pytest.raises(OpSpecError, match="library tensorflow has no method lanczos here") as info:
        pre(op="resize", size=8, keep_aspect_ratio=True, method="lanczos", library="tensorflow", antialias=True)
    assert info.value.key == "method" and info.value.allowed == ["area", "bicubic", "bilinear", "nearest"]
    with pytest.raises(OpSpecError, match="always averages; set antialias: true"):
        pre(op="resize", size=8, keep_aspect_ratio=True, method="area", library="tensorflow", antialias=False)
    with pytest.raises(OpSpecError, match="samples one pixel; set antialias: false"):
        pre(op="resize", size=8, keep_aspect_ratio=True, method="nearest", library="tensorflow", antialias=True)
    op = pre(op="resize", size=8, keep_aspect_ratio=True, method="bilinear", library="tensorflow", antialias=False)
    with pytest.raises(
        OpSpecError,
        match=r"returns float32 \(tf.image.resize\), so it takes float32 images, got "
        r"uint8; put 'to_float'",
    ) as info:
        op(hwc_item(smooth_rgb(16, 20)))
    assert info.value.key == "library"


def test_tensorflow_letterbox_is_the_model_gardens_grey_border() -> None:
    """letterbox with library tensorflow: TF's bilinear inside, 114/255 around (the Model Garden's / Ultralytics'
    grey), geometry as for every library."""
    x = smooth_rgb(30, 60, seed=1).astype(np.float32) / 255
    op = pre(
        op="letterbox",
        size=[32, 32],
        color=[114 / 255] * 3,
        position="center",
        order="resize_then_pad",
        method="bilinear",
        library="tensorflow",
        antialias=False,
    )
    out = op(hwc_item(x)).data
    assert out.shape == (32, 32, 3) and out.dtype == np.float32
    assert np.all(out[:8] == np.float32(114 / 255)) and np.all(out[-8:] == np.float32(114 / 255))
    inner = cv2.resize(x, (32, 16), interpolation=cv2.INTER_LINEAR)
    assert np.abs(out[8:24] - inner).max() < 1e-4


def test_tensorflow_is_imported_only_when_an_op_runs() -> None:
    """The core imports no ML framework at module level: building a manifest's tensorflow ops (validation
    included) leaves TensorFlow unimported; the first decode imports it."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import repliscope, repliscope.ops, repliscope.pitfalls.yolo_variants\n"
        "from repliscope.ops import BuildContext, build_op\n"
        "d = build_op({'op': 'decode', 'library': 'tensorflow', 'channels': 'RGB'}, 'pre', BuildContext())\n"
        "build_op({'op': 'resize', 'size': 8, 'keep_aspect_ratio': True, 'method': 'area', 'library': 'tensorflow',"
        " 'antialias': True}, 'pre', BuildContext())\n"
        "print('tensorflow' in sys.modules)\n"
        "import io, numpy as np\n"
        "from PIL import Image\n"
        "from repliscope.ops.pipeline import decode_input\n"
        "buf = io.BytesIO(); Image.new('RGB', (4, 4)).save(buf, 'PNG')\n"
        "d(decode_input(buf.getvalue()))\n"
        "print('tensorflow' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert proc.stdout.split() == ["False", "True"]

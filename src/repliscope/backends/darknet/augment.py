"""libdarknet's own training augmentations, one op at a time, with their random draws given from outside.

Darknet's detector training (``load_data_detection`` in ``src/data.c``, pjreddie 2018 as Debian ships it) draws
from the C library's ``rand()`` and applies, per image: the jitter/aspect placement on a 0.5-grey canvas
(``place_image``, bilinear), the HSV distortion (``distort_image``: hue shift, saturation and exposure scales,
clipped to [0, 1]) and a horizontal flip (``flip_image``); the boxes follow through ``correct_boxes``. This module
calls those same functions through ctypes with explicit parameters, so a port's op can be compared with the
original's on the same draws, and runs ``load_data_detection`` itself (seeded with ``srand``) to pin that the ops
in sequence ARE the original's whole augmentation.

Images cross this interface as float32 ``(H, W, 3)`` RGB in [0, 1] (HWC; libdarknet stores CHW); boxes as float32
``(K, 5)`` rows ``(cx, cy, w, h, class)`` normalised to the image (Darknet's label-file convention).
"""

from __future__ import annotations

import ctypes
import functools
import tempfile
from ctypes import POINTER, Structure, c_char_p, c_float, c_int
from pathlib import Path

import numpy as np

from repliscope.backends.darknet.lib import DATA, IMAGE, load_library

MAX_BOXES = 90
"""``load_data_detection``'s ``boxes`` argument in ``train_detector`` (detector.c): truths per image."""


class BOX_LABEL(Structure):
    _fields_ = [
        ("id", c_int),
        ("x", c_float),
        ("y", c_float),
        ("w", c_float),
        ("h", c_float),
        ("left", c_float),
        ("right", c_float),
        ("top", c_float),
        ("bottom", c_float),
    ]


@functools.cache
def _lib() -> ctypes.CDLL:
    lib = load_library()
    sigs: dict[str, tuple[list[object], object]] = {
        "place_image": ([IMAGE, c_int, c_int, c_int, c_int, IMAGE], None),
        "distort_image": ([IMAGE, c_float, c_float, c_float], None),
        "flip_image": ([IMAGE], None),
        "fill_image": ([IMAGE, c_float], None),
        "correct_boxes": ([POINTER(BOX_LABEL), c_int, c_float, c_float, c_float, c_float, c_int], None),
        "load_data_detection": (
            [c_int, POINTER(c_char_p), c_int, c_int, c_int, c_int, c_int, c_float, c_float, c_float, c_float],
            DATA,
        ),
        "free_data": ([DATA], None),
        "rand_uniform": ([c_float, c_float], c_float),
    }
    for name, (args, res) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res
    return lib


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL("libc.so.6")
    libc.srand.argtypes = [ctypes.c_uint]
    libc.rand.restype = c_int
    return libc


def srand(seed: int) -> None:
    """Seed the C library's ``rand()``, the generator every libdarknet draw reads (one per process)."""
    _libc().srand(seed)


def rand() -> int:
    """The C library's next ``rand()`` (what libdarknet's next draw would read)."""
    return int(_libc().rand())


RAND_MAX = 2147483647
"""glibc's RAND_MAX."""


class _Image:
    """A libdarknet ``image`` owning a CHW float32 buffer (kept alive with the struct)."""

    def __init__(self, chw: np.ndarray) -> None:
        self.buf = np.ascontiguousarray(chw, dtype=np.float32)
        c, h, w = self.buf.shape
        self.struct = IMAGE(w, h, c, self.buf.ctypes.data_as(POINTER(c_float)))

    def hwc(self) -> np.ndarray:
        return np.ascontiguousarray(self.buf.transpose(1, 2, 0))


def _chw(hwc: np.ndarray) -> np.ndarray:
    if hwc.ndim != 3 or hwc.shape[2] != 3:
        raise ValueError(f"an augmentation image is (H, W, 3) float32 RGB in [0, 1], got shape {hwc.shape}")
    return np.ascontiguousarray(np.asarray(hwc, dtype=np.float32).transpose(2, 0, 1))


def _labels(boxes: np.ndarray) -> ctypes.Array[BOX_LABEL]:
    """(K, 5) cx, cy, w, h, class -> box_label[K] with left/right/top/bottom as ``read_boxes`` sets them."""
    arr = (BOX_LABEL * max(len(boxes), 1))()
    for i, (x, y, w, h, cls) in enumerate(np.asarray(boxes, dtype=np.float32)):
        f = np.float32
        arr[i] = BOX_LABEL(
            int(cls), x, y, w, h, f(x) - f(w) / f(2), f(x) + f(w) / f(2), f(y) - f(h) / f(2), f(y) + f(h) / f(2)
        )
    return arr


def _from_labels(arr: ctypes.Array[BOX_LABEL], n: int) -> np.ndarray:
    return np.array([[b.x, b.y, b.w, b.h, b.id] for b in arr[:n]], dtype=np.float32).reshape(-1, 5)


def place(image: np.ndarray, *, nw: float, nh: float, dx: float, dy: float, out_w: int, out_h: int) -> np.ndarray:
    """``fill_image(canvas, .5)`` then ``place_image(im, (int)nw, (int)nh, (int)dx, (int)dy, canvas)``: the image
    resized bilinearly (zero outside the source) to the truncated size at the truncated offset."""
    lib = _lib()
    src = _Image(_chw(image))
    canvas = _Image(np.empty((3, out_h, out_w), np.float32))
    lib.fill_image(canvas.struct, c_float(0.5))
    lib.place_image(src.struct, int(np.float32(nw)), int(np.float32(nh)), int(np.float32(dx)), int(np.float32(dy)),
                    canvas.struct)  # fmt: skip
    return canvas.hwc()


def distort(image: np.ndarray, *, hue: float, saturation: float, exposure: float) -> np.ndarray:
    """``distort_image(im, hue, sat, val)``: RGB -> HSV, S *= sat, V *= val, H += hue (wrapped into [0, 1]),
    HSV -> RGB, clip to [0, 1]."""
    img = _Image(_chw(image))
    _lib().distort_image(img.struct, c_float(hue), c_float(saturation), c_float(exposure))
    return img.hwc()


def flip(image: np.ndarray, *, flip: bool) -> np.ndarray:
    """``flip_image`` (mirror each row) when ``flip``."""
    img = _Image(_chw(image))
    if flip:
        _lib().flip_image(img.struct)
    return img.hwc()


def truth(
    boxes: np.ndarray,
    *,
    box_order: tuple[int, ...],
    nw: float,
    nh: float,
    dx: float,
    dy: float,
    flip: bool,
    out_w: int,
    out_h: int,
) -> np.ndarray:
    """``fill_truth_detection``'s box work: the rows in ``randomize_boxes``' order, ``correct_boxes(boxes, n,
    -dx/w, -dy/h, nw/w, nh/h, flip)`` (scale, shift, mirror, clip to [0, 1]), then boxes under 0.001 wide or high
    dropped and at most :data:`MAX_BOXES` kept. Debian builds darknet with ``-Ofast``: the caller's ``x / w`` are
    multiplications by the reciprocal (which moves the last bit of a box edge): done the same way here."""
    rows = np.asarray(boxes, dtype=np.float32).reshape(-1, 5)[list(box_order)]
    labels = _labels(rows)
    f = np.float32
    rw, rh = f(f(1) / f(out_w)), f(f(1) / f(out_h))
    _lib().correct_boxes(
        labels, len(rows), f(-f(dx) * rw), f(-f(dy) * rh), f(f(nw) * rw), f(f(nh) * rh), int(bool(flip))
    )
    out = _from_labels(labels, len(rows))[:MAX_BOXES]
    return out[(out[:, 2] >= f(0.001)) & (out[:, 3] >= f(0.001))]


def load_data_detection(
    image_path: Path,
    label_rows: np.ndarray,
    *,
    seed: int,
    width: int,
    height: int,
    classes: int,
    jitter: float,
    hue: float,
    saturation: float,
    exposure: float,
) -> tuple[np.ndarray, np.ndarray]:
    """libdarknet's whole ``load_data_detection`` for one image after ``srand(seed)``: the augmented image
    ((height, width, 3) float32) and the truth rows it writes ((k, 5): x, y, w, h, class; zero rows dropped).

    The image is copied to ``images/x.<ext>`` in a temporary folder beside ``labels/x.txt`` written from
    ``label_rows`` (Darknet finds the label file by replacing ``images`` with ``labels`` in the path)."""
    lib = _lib()
    with tempfile.TemporaryDirectory(prefix="repliscope-darknet-aug-") as tmp:
        root = Path(tmp)
        (root / "images").mkdir()
        (root / "labels").mkdir()
        suffix = image_path.suffix.lower() if image_path.suffix.lower() in (".jpg", ".png", ".jpeg") else ".jpg"
        img = root / "images" / f"x{suffix}"
        img.write_bytes(image_path.read_bytes())
        lines = [f"{int(c)} {x:.9g} {y:.9g} {w:.9g} {h:.9g}" for x, y, w, h, c in np.asarray(label_rows, float)]
        (root / "labels" / "x.txt").write_text("\n".join(lines) + "\n")
        paths = (c_char_p * 1)(str(img).encode())
        srand(seed)
        d = lib.load_data_detection(1, paths, 1, width, height, MAX_BOXES, classes, jitter, hue, saturation, exposure)
        try:
            x = np.ctypeslib.as_array(d.X.vals[0], shape=(3 * height * width,)).copy()
            y = np.ctypeslib.as_array(d.y.vals[0], shape=(5 * MAX_BOXES,)).copy().reshape(MAX_BOXES, 5)
        finally:
            lib.free_data(d)
    kept = y[np.any(y != 0, axis=1)]
    return np.ascontiguousarray(x.reshape(3, height, width).transpose(1, 2, 0)), kept


def load_image(data: bytes, suffix: str = ".jpg") -> np.ndarray:
    """``load_image_color`` (Debian's build decodes with OpenCV) of the encoded ``data``: float32 (H, W, 3) RGB."""
    lib = _lib()
    with tempfile.NamedTemporaryFile(suffix=suffix, prefix="repliscope-darknet-") as tmp:
        tmp.write(data)
        tmp.flush()
        im = lib.load_image_color(tmp.name.encode(), 0, 0)
    try:
        if im.w <= 0 or im.h <= 0 or not im.data:
            raise ValueError("libdarknet could not decode the image")
        chw = np.ctypeslib.as_array(im.data, shape=(3 * im.h * im.w,)).copy().reshape(3, im.h, im.w)
    finally:
        lib.free_image(im)
    return np.ascontiguousarray(chw.transpose(1, 2, 0))

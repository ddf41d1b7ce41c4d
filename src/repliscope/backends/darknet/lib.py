"""ctypes bindings to Debian's ``/usr/lib/darknet/libdarknet.so`` (the structs of ``darknet.h`` that cross the
boundary: ``image``, ``box``, ``detection``), loaded once per process.

Darknet calls ``exit()`` on a file it cannot read, so callers check their files first (repliscope's own cfg /
weights reader) and only then hand them to the library.
"""

from __future__ import annotations

import ctypes
import functools
import os
from ctypes import POINTER, Structure, c_char_p, c_float, c_int, c_void_p
from pathlib import Path

from repliscope.errors import FrameworkError

LIBDARKNET = Path(os.environ.get("REPLISCOPE_LIBDARKNET", "/usr/lib/darknet/libdarknet.so"))
INSTALL_HINT = "darknet is not installed; install it with: apt-get install darknet"


class IMAGE(Structure):
    _fields_ = [("w", c_int), ("h", c_int), ("c", c_int), ("data", POINTER(c_float))]


class BOX(Structure):
    _fields_ = [("x", c_float), ("y", c_float), ("w", c_float), ("h", c_float)]


class DETECTION(Structure):
    _fields_ = [
        ("bbox", BOX),
        ("classes", c_int),
        ("prob", POINTER(c_float)),
        ("mask", POINTER(c_float)),
        ("objectness", c_float),
        ("sort_class", c_int),
    ]


class MATRIX(Structure):
    """``typedef struct matrix {int rows, cols; float **vals;}``."""

    _fields_ = [("rows", c_int), ("cols", c_int), ("vals", POINTER(POINTER(c_float)))]


class DATA(Structure):
    """``typedef struct {int w, h; matrix X; matrix y; int shallow; int *num_boxes; box **boxes;} data``: what
    ``load_data_detection`` returns and ``train_network`` takes."""

    _fields_ = [
        ("w", c_int),
        ("h", c_int),
        ("X", MATRIX),
        ("y", MATRIX),
        ("shallow", c_int),
        ("num_boxes", POINTER(c_int)),
        ("boxes", POINTER(POINTER(BOX))),
    ]


def _sig(lib: ctypes.CDLL, name: str, argtypes: list[object], restype: object = None) -> None:
    fn = getattr(lib, name)
    fn.argtypes = argtypes
    fn.restype = restype


@functools.cache
def load_library() -> ctypes.CDLL:
    """libdarknet with the signatures repliscope uses; FrameworkError with the install command when absent."""
    if not LIBDARKNET.is_file():
        raise FrameworkError(f"{INSTALL_HINT} (no {LIBDARKNET})")
    try:
        # RTLD_LOCAL (not the RTLD_GLOBAL of Darknet's python example): libdarknet pulls in Debian's OpenCV -> GDAL
        # -> libhdf5_serial, whose symbols would then interpose on h5py's own bundled HDF5 (Keras .keras files:
        # "ValueError: Not a datatype") for the rest of the process
        lib = ctypes.CDLL(str(LIBDARKNET), mode=ctypes.RTLD_LOCAL)
    except OSError as exc:
        raise FrameworkError(f"cannot load {LIBDARKNET}: {exc}; reinstall it with: apt-get install darknet") from exc
    restore_float_environment()
    _sig(lib, "load_network", [c_char_p, c_char_p, c_int], c_void_p)
    _sig(lib, "free_network", [c_void_p])
    _sig(lib, "set_batch_network", [c_void_p, c_int])
    _sig(lib, "resize_network", [c_void_p, c_int, c_int], c_int)
    _sig(lib, "network_predict", [c_void_p, POINTER(c_float)], POINTER(c_float))
    _sig(lib, "network_width", [c_void_p], c_int)
    _sig(lib, "network_height", [c_void_p], c_int)
    _sig(lib, "get_network_image_layer", [c_void_p, c_int], IMAGE)
    _sig(lib, "load_image_color", [c_char_p, c_int, c_int], IMAGE)
    _sig(lib, "letterbox_image", [IMAGE, c_int, c_int], IMAGE)
    _sig(lib, "resize_image", [IMAGE, c_int, c_int], IMAGE)
    _sig(lib, "make_image", [c_int, c_int, c_int], IMAGE)
    _sig(lib, "free_image", [IMAGE])
    _sig(
        lib,
        "get_network_boxes",
        [c_void_p, c_int, c_int, c_float, c_float, POINTER(c_int), c_int, POINTER(c_int)],
        POINTER(DETECTION),
    )
    _sig(lib, "free_detections", [POINTER(DETECTION), c_int])
    _sig(lib, "do_nms_sort", [POINTER(DETECTION), c_int, c_int, c_float])
    _sig(lib, "do_nms_obj", [POINTER(DETECTION), c_int, c_int, c_float])
    return lib


def restore_float_environment() -> None:
    """Debian builds libdarknet with ``-Ofast``, which links GCC's ``crtfastmath.o``: loading the library turns on
    flush-to-zero and denormals-are-zero for the loading thread, so every later float computation of the process
    (numpy, onnxruntime, torch on that thread) would flush subnormal numbers to 0. The C library's default
    floating-point environment is restored right after the load (``fesetenv(FE_DFL_ENV)``; glibc's FE_DFL_ENV is
    ``(const fenv_t *) -1``): libdarknet's own results are unchanged where no subnormal occurs, which is every
    result repliscope pins (``tests/backends/test_darknet_float_env.py``)."""
    try:
        libm = ctypes.CDLL("libm.so.6")
    except OSError:
        return
    libm.fesetenv.argtypes = [c_void_p]
    libm.fesetenv.restype = c_int
    libm.fesetenv(c_void_p(-1))


@functools.cache
def set_threads(n: int) -> None:
    """OpenMP threads of libdarknet's gemm (libgomp's ``omp_set_num_threads``, process-wide)."""
    try:
        gomp = ctypes.CDLL("libgomp.so.1")
    except OSError:
        return
    gomp.omp_set_num_threads(c_int(n))


def network_layer_count(net: int) -> int:
    """``net->n``: the first field of ``struct network``."""
    return ctypes.cast(net, POINTER(c_int))[0]


def debian_version() -> str:
    from repliscope.manifest.frameworks import debian_darknet_version

    return debian_darknet_version() or "unknown"

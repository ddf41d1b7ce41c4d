"""Darknet's pre/post-processing ops pinned to libdarknet itself (Debian's build), on Darknet's sample images:
the network input bit for bit, the detections of ``detector valid`` / ``detector test`` / the Python example
(``do_nms_sort`` / ``do_nms_obj``) with the same order, classes and probabilities, boxes to float rounding."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from repliscope.errors import FrameworkError
from repliscope.ops.base import Geometry, Item, Predictions
from repliscope.ops.darknet.boxes import DarknetBoxes, DarknetBoxesParams
from repliscope.ops.darknet.letterbox import DarknetLetterbox, DarknetLetterboxParams, letterbox_size, resize_image
from repliscope.ops.darknet.nms import CorrectBoxesParams, DarknetCorrectBoxes, DarknetNms, DarknetNmsParams
from repliscope.ops.darknet.yolo_head import YoloDecode, YoloDecodeParams
from repliscope.runtimes.base import ModelArtifact
from tests.yolo._assets import DARKNET_DATA, SAMPLE_IMAGES, cfg_path, need_darknet, weights_path

ANCHORS = [[10, 14], [23, 27], [37, 58], [81, 82], [135, 169], [344, 319]]


def _decode_like_darknet(path: Path) -> np.ndarray:
    """The pipeline's decode -> to_float -> divide_std 255 -> CHW, as the manifest does it."""
    bgr = cv2.imread(str(path))
    return (bgr[:, :, ::-1].astype(np.float32) / np.float32(255.0)).transpose(2, 0, 1).copy()


@pytest.fixture(scope="module")
def runner():  # type: ignore[no-untyped-def]
    need_darknet()
    from repliscope.backends.darknet.runner import DarknetRunner

    artifact = ModelArtifact(
        path=weights_path(),
        sha256="",
        format="darknet",
        input_name="data",
        input_shape=(-1, 3, 416, 416),
        input_dtype="float32",
        output_names=("yolo_16", "yolo_23"),
        config_path=cfg_path(),
    )
    r = DarknetRunner(artifact, threads=1, cache_dir=Path("/nonexistent"))
    r.load()
    return r


def test_resize_image_hand_case() -> None:
    im = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    out = resize_image(im, 3, 2)
    # corners map to corners: columns 0, 1.5, 3; rows 0, 2
    assert out.tolist() == [[[0.0, 1.5, 3.0], [8.0, 9.5, 11.0]]]
    assert letterbox_size(768, 576, 416, 416) == (416, 312)
    assert letterbox_size(500, 500, 416, 416) == (416, 416)


@pytest.mark.parametrize("name", SAMPLE_IMAGES)
def test_network_input_is_libdarknets_bit_for_bit(name: str) -> None:
    need_darknet()
    from repliscope.backends.darknet import reference

    path = DARKNET_DATA / name
    mine = _decode_like_darknet(path)
    assert np.array_equal(mine, reference.load_image(path))  # OpenCV decode + x / 255. as load_image_color
    op = DarknetLetterbox(DarknetLetterboxParams(size=[416, 416], fill=0.5, keep_aspect_ratio=True))
    got = op(Item(mine, "CHW", "RGB", Geometry(mine.shape[1:]))).data
    want = reference.letterbox(path, 416, 416)
    assert got.dtype == np.float32 and got.shape == (3, 416, 416)
    assert np.array_equal(got, want)


def test_resize_on_random_values_is_bit_exact() -> None:
    need_darknet()
    from repliscope.backends.darknet import reference

    rng = np.random.default_rng(0)
    for h, w in [(7, 5), (33, 61), (200, 123)]:
        im = rng.random((3, h, w), dtype=np.float32)
        op = DarknetLetterbox(DarknetLetterboxParams(size=[64, 96], fill=0.5, keep_aspect_ratio=True))
        assert np.array_equal(op(Item(im, "CHW", "RGB", Geometry((h, w)))).data, reference.letterbox_array(im, 96, 64))


def _post(outs: dict[str, np.ndarray], hw: tuple[int, int], thresh: float, method: str) -> Predictions:
    preds = Predictions(scores=np.zeros((1, 1), np.float32), outputs=outs, geometry=[Geometry(hw)])
    preds = YoloDecode(
        YoloDecodeParams(
            outputs=["yolo_16", "yolo_23"],
            masks=[[3, 4, 5], [0, 1, 2]],
            anchors=ANCHORS,
            classes=80,
            input_size=[416, 416],
            threshold=thresh,
            activated=True,
            multiply_objectness=True,
        )
    )(preds)
    preds = DarknetCorrectBoxes(CorrectBoxesParams(input_size=[416, 416], relative=False, letterbox=True))(preds)
    return DarknetNms(DarknetNmsParams(method=method, iou_threshold=0.45))(preds)  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "thresh", "method", "count"),
    [
        ("dog.jpg", 0.005, "sort", 70),
        ("dog.jpg", 0.5, "obj", 5),
        ("dog.jpg", 0.25, "sort", 6),
        ("kite.jpg", 0.005, "sort", 34),
    ],
)
def test_detections_equal_libdarknets(runner, name: str, thresh: float, method: str, count: int) -> None:  # type: ignore[no-untyped-def]
    from repliscope.backends.darknet import reference

    path = DARKNET_DATA / name
    x = reference.letterbox(path, 416, 416)
    hw = reference.load_image(path).shape[1:]
    want = reference.detect(runner, x, hw, thresh=thresh, method=method)  # type: ignore[arg-type]
    d = _post(runner.infer_outputs(x[None]), hw, thresh, method).detections[0]
    det, cls = np.nonzero(d.probs)
    assert len(want) == len(det) == count
    assert [w.class_id for w in want] == cls.tolist()  # same order (Darknet's array after its qsorts), same classes
    assert [w.prob for w in want] == d.probs[det, cls].tolist()  # probabilities bit for bit
    # boxes: x, y, w equal; h within 2 float32 ulps (libdarknet is built with -Ofast)
    np.testing.assert_array_max_ulp(np.array([w.box for w in want], np.float32), d.boxes[det], maxulp=2)


def test_sort_and_obj_differ_and_final_boxes(runner) -> None:  # type: ignore[no-untyped-def]
    from repliscope.backends.darknet import reference

    path = DARKNET_DATA / "dog.jpg"
    x = reference.letterbox(path, 416, 416)
    outs = runner.infer_outputs(x[None])
    sort = _post(outs, (576, 768), 0.25, "sort")
    obj = _post(outs, (576, 768), 0.25, "obj")
    n_sort, n_obj = int(np.count_nonzero(sort.detections[0].probs)), int(np.count_nonzero(obj.detections[0].probs))
    assert (n_sort, n_obj) == (6, 6)  # at .25 the two NMS agree on this image
    final = DarknetBoxes(DarknetBoxesParams(clip=True))(sort).detections[0]
    assert sorted(final.classes.tolist()) == [1, 2, 2, 7, 7, 16]  # bicycle, car x2, truck x2, dog
    assert final.boxes.min() >= 0 and final.boxes[:, 2].max() <= 768 and final.boxes[:, 3].max() <= 576


def test_runtime_without_darknet_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from repliscope.backends.darknet import lib

    monkeypatch.setattr(lib, "LIBDARKNET", tmp_path / "libdarknet.so")
    lib.load_library.cache_clear()
    try:
        with pytest.raises(FrameworkError, match="darknet is not installed; install it with: apt-get install darknet"):
            lib.load_library()
    finally:
        lib.load_library.cache_clear()


def test_framework_tracing_spans(runner) -> None:  # type: ignore[no-untyped-def]
    import contextlib

    from repliscope.tracing.instruments import instrument_runner

    class Recorder:
        rank = 99

        def __init__(self) -> None:
            self.spans: list[tuple[str, str]] = []

        @contextlib.contextmanager
        def span(self, name: str, level: str, **attrs: object):  # type: ignore[no-untyped-def]
            self.spans.append((name, level))
            yield

        def record(self, name: str, level: str, *args: object) -> None:
            self.spans.append((name, level))

    rec = Recorder()
    with instrument_runner(rec, runner):
        runner.infer_outputs(np.zeros((2, 3, 416, 416), np.float32))
    assert runner.tracer is None and runner.layer_timer is None
    # the stage spans as they open, then the 24 layer spans of each image (tests/yolo/test_darknet_layers.py)
    assert rec.spans[:4] == [("darknet.run", "framework"), ("read_outputs", "framework")] * 2
    layers = [name for name, _ in rec.spans[4:]]
    assert len(layers) == 48 and layers[:2] == ["convolutional_0", "maxpool_1"] and layers[23] == "yolo_23"


def test_runtime_refuses_channels_the_cfg_does_not_have(tmp_path: Path) -> None:
    """Another height/width runs through libdarknet's resize_network (tests/yolo/test_yolo_input_size.py); another
    channel count cannot: libdarknet's input always has the cfg's channels."""
    need_darknet()
    from repliscope.backends.darknet.runner import DarknetRunner
    from repliscope.runtimes.errors import ModelLoadError

    artifact = ModelArtifact(
        path=weights_path(),
        sha256="",
        format="darknet",
        input_name="data",
        input_shape=(-1, 1, 416, 416),
        input_dtype="float32",
        output_names=("yolo_16",),
        config_path=cfg_path(),
    )
    with pytest.raises(
        ModelLoadError,
        match=r"input shape \[-1, 1, 416, 416\] differs from the cfg's \[net\] "
        r"channels 3",
    ):
        DarknetRunner(artifact, threads=1, cache_dir=tmp_path).load()

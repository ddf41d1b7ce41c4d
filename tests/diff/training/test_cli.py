"""``repliscope diff MANIFEST --gradients PORT [--train-steps K]`` end to end: JSON, the store, the loss chart;
a port that raises, returns NaN or has the wrong shape is one line and exit 2 (nothing stored)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from repliscope.cli.diff_cmd import register
from tests.yolo._assets import MANIFEST, need_coco, need_darknet, seed_cache


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def version() -> None:  # a second command, so "diff" stays a sub-command as in the real CLI
        print("0")

    register(app)
    return app


@pytest.fixture
def coco() -> str:
    need_darknet()
    pytest.importorskip("keras")
    seed_cache()
    return f"coco:{need_coco()}"


def _run(app: typer.Typer, port: str, *extra: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, ["diff", str(MANIFEST), "--gradients", port, *extra])
    return res.exit_code, res.stdout, res.stderr


PORTS = """
import keras


def raises(net):
    raise ValueError("my port is broken\\nsecond line")


def nan_slope(net):
    from repliscope.diff.training.keras_port import build_training_port

    return build_training_port(net, leaky_slope=float("nan"))


class Boom(keras.layers.Layer):
    def call(self, x, training=False):
        if training:
            raise RuntimeError("boom in call")
        return x


def raises_in_call(net):
    from repliscope.diff.training.keras_port import build_training_port

    model = build_training_port(net)
    out = Boom(name="boom")(model.get_layer("convolutional_15").output)
    return keras.Model(model.inputs, [*model.outputs, out])
"""


def _empty_store(db: str) -> None:
    from repliscope.store.diffs import list_diffs
    from repliscope.store.repository import RunStore

    with RunStore(db) as store:
        assert list_diffs(store)[1] == 0


@pytest.mark.slow
def test_bad_ports_are_one_line_and_exit_2(app: typer.Typer, coco: str, tmp_path: Path) -> None:
    ports = tmp_path / "ports.py"
    ports.write_text(PORTS, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 's.db'}"
    common = ("--dataset", coco, "--db", db)
    code, out, err = _run(app, f"{ports}:raises", *common)
    assert code == 2 and err == f"error: --gradients {ports}:raises raised ValueError: my port is broken\n"
    code, out, err = _run(app, f"{ports}:nan_slope", *common)
    assert code == 2 and err.startswith("error: the port's output of convolutional_0 has ") and "NaN/Inf" in err
    assert err.count("\n") == 1
    boom = tmp_path / "boom.yaml"
    boom.write_text("convolutional_15: {output: boom}\n")  # the training-only raise sits on the path to yolo_16
    code, out, err = _run(app, f"{ports}:raises_in_call", *common, "--mapping", str(boom))
    assert code == 2 and out == ""
    assert err == "error: the port raised RuntimeError: Exception encountered when calling Boom.call(). boom in call\n"
    _empty_store(db)


@pytest.mark.slow
def test_bad_mapping_and_options_are_one_line_and_exit_2(app: typer.Typer, coco: str, tmp_path: Path) -> None:
    ports = tmp_path / "ports.py"
    ports.write_text(PORTS, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 's.db'}"
    common = ("--dataset", coco, "--db", db)
    mapping = tmp_path / "m.yaml"
    mapping.write_text("convolutional_2: {conv: convolutional_4_conv}\n")
    code, out, err = _run(app, "darknet-keras", *common, "--mapping", str(mapping))
    assert code == 2 and err.count("\n") == 1
    assert "convolutional_2.weights: the port's variable convolutional_4_conv/kernel has shape (3, 3, 32, 64)" in err
    code, out, err = _run(app, f"{ports}:raises_in_call", *common, "--mapping", str(mapping.with_name("none.yaml")))
    assert code == 2 and err == f"error: --mapping {mapping.with_name('none.yaml')}: no such file\n"
    code, out, err = _run(app, "darknet-keras", *common, "--port-loss", "nope")
    assert code == 2 and err.startswith("error: --port-loss 'nope': not a registered loss (allowed: ")
    assert "darknet_yolo" in err and err.count("\n") == 1
    code, out, err = _run(app, "darknet-keras", *common, "--port-bn", "torch")
    assert code == 2 and err == "error: --port-bn 'torch' (allowed: darknet, autodiff, keras)\n"
    code, out, err = _run(app, "weights.h5", *common)
    assert code == 2 and out == "" and "give darknet-keras, a .keras file, or FILE.py:NAME" in err
    _empty_store(db)


@pytest.mark.slow
def test_gradients_and_two_steps_json_store_and_chart(app: typer.Typer, coco: str, tmp_path: Path) -> None:
    from repliscope.store.diffs import get_diff, list_diffs
    from repliscope.store.repository import RunStore

    db = f"sqlite:///{tmp_path / 's.db'}"
    png = tmp_path / "loss.png"
    args = ("--dataset", coco, "--train-steps", "2", "--db", db, "--plot", str(png), "--json")
    code, out, err = _run(app, "darknet-keras", *args)
    assert code == 0, err
    data = json.loads(out)
    grad, steps = data["gradient_diff"], data["training_step_diff"]
    assert grad["passed"] and grad["first_divergent"] is None and len(grad["params"]) == 37
    assert grad["images"] == ["000000000139.jpg"] and grad["cost"] > 0
    assert steps["passed"] and [r["step"] for r in steps["rows"]] == [1, 2]
    assert all(r["learning_rate"] == pytest.approx(1e-5, rel=1e-6) for r in steps["rows"])
    assert png.read_bytes()[:4] == b"\x89PNG"
    with RunStore(db) as store:
        listed, total = list_diffs(store)
        assert total == 2 and sorted(d.kind for d in listed) == ["gradient_diff", "training_step_diff"]
        stored = {d.kind: get_diff(store, d.diff_id) for d in listed}
    assert stored["training_step_diff"].has_figure and stored["gradient_diff"].verdict == "passed"
    assert stored["gradient_diff"].result["params"] == grad["params"]


def test_a_mapping_with_a_python_tag_runs_nothing(app: typer.Typer, tmp_path: Path) -> None:
    """--mapping is read with yaml.safe_load: a tag that would run a shell command is an error naming the flag."""
    marker = tmp_path / "pwned"
    mapping = tmp_path / "m.yaml"
    mapping.write_text(f'convolutional_0: !!python/object/apply:os.system ["touch {marker}"]\n', encoding="utf-8")
    code, out, err = _run(app, "darknet-keras", "--mapping", str(mapping), "--no-store")
    assert code == 2 and out == "" and not marker.exists()
    assert err.startswith(f"error: --mapping {mapping}: not YAML (") and err.count("\n") == 1
    mapping.write_text("- convolutional_0\n", encoding="utf-8")
    code, out, err = _run(app, "darknet-keras", "--mapping", str(mapping), "--no-store")
    assert code == 2 and "a YAML mapping 'darknet_layer: keras_layer'" in err

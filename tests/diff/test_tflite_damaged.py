"""Issue 20 item 13: ``diff ... --candidate truncated.tflite`` exited 139 (a segfault in TensorFlow's interpreter,
which skips the flatbuffer verifier for a ``model_path``); now a one-line error and exit 2. Run in a subprocess:
on the old code the crash would take pytest down with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from repliscope.backends.tflite.loader import read_tflite
from repliscope.errors import RepliscopeError
from tests.conftest import EXAMPLES

TINY = EXAMPLES / "tiny-resnet.yaml"


@pytest.fixture(scope="module")
def small_tflite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A float32 (1, 3, 8, 8) -> (1, 10) dense model converted by TFLiteConverter (about 5 KB)."""
    tf = pytest.importorskip("tensorflow")
    import numpy as np

    out = tmp_path_factory.mktemp("tflite") / "small.tflite"
    weights = tf.constant(np.linspace(-1, 1, 192 * 10, dtype=np.float32).reshape(192, 10))

    @tf.function(input_signature=[tf.TensorSpec([1, 3, 8, 8], tf.float32)])
    def model(x: object) -> object:
        return tf.nn.relu(tf.matmul(tf.reshape(x, [1, 192]), weights))

    converter = tf.lite.TFLiteConverter.from_concrete_functions([model.get_concrete_function()], model)
    out.write_bytes(converter.convert())
    return out


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from repliscope.cli.main import app; sys.argv[0] = 'repliscope'; app()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # converts a model, then a CLI process imports torch and TensorFlow (about 55 s)
def test_truncated_tflite_candidate_is_a_clean_error(small_tflite: Path, tmp_path: Path) -> None:
    data = small_tflite.read_bytes()
    assert data[4:8] == b"TFL3" and len(data) > 4000
    truncated = tmp_path / "truncated.tflite"
    truncated.write_bytes(data[: len(data) // 2])
    res = _cli("diff", str(TINY), "--candidate", str(truncated), "--batch", "2")
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert res.stderr.strip().splitlines()[-1] == (
        f"error: TFLite candidate '{truncated}' cannot be loaded: The model is not a valid Flatbuffer buffer"
    )
    assert "Traceback" not in res.stderr


def test_files_that_are_not_tflite_are_refused_before_the_interpreter(tmp_path: Path) -> None:
    header = tmp_path / "header.tflite"
    header.write_bytes(b"\x1c\x00\x00\x00TFL3" + b"\x00" * 24)
    assert read_tflite(header) == header.read_bytes()  # the interpreter's verifier judges the rest
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"\x00" * 100)
    with pytest.raises(RepliscopeError, match=r"not a TFLite model: no 'TFL3' flatbuffer identifier \(100 bytes\)"):
        read_tflite(junk)
    tiny = tmp_path / "tiny.tflite"
    tiny.write_bytes(b"1234")
    with pytest.raises(RepliscopeError, match=r"no 'TFL3' flatbuffer identifier \(4 bytes\)"):
        read_tflite(tiny)

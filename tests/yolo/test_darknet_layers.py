"""libdarknet's forward loop driven from Python (per-layer spans): the ctypes ``struct layer`` / ``struct network``
equal the compiler's layout of Debian's darknet.h field for field, the loop's every-layer outputs equal
``network_predict``'s bit for bit on Darknet's sample images, and tracing at ``framework`` level gives one span
per Darknet layer."""

from __future__ import annotations

import ctypes
import itertools
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from repliscope.backends.darknet.structs import LAYER, NETWORK
from repliscope.errors import FrameworkError
from repliscope.runtimes.base import ModelArtifact
from tests.yolo._assets import DARKNET_DATA, SAMPLE_IMAGES, cfg_path, need_darknet, weights_path

HEADER_DIR = Path("/usr/lib/darknet/include")
NAMES = [
    *(f"convolutional_{i}" if i % 2 == 0 else f"maxpool_{i}" for i in range(12)),
    "convolutional_12",
    "convolutional_13",
    "convolutional_14",
    "convolutional_15",
    "yolo_16",
    "route_17",
    "convolutional_18",
    "upsample_19",
    "route_20",
    "convolutional_21",
    "convolutional_22",
    "yolo_23",
]


def test_struct_layout_equals_the_compilers(tmp_path: Path) -> None:
    """sizeof and offsetof of every field, compiled against the package's own darknet.h."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None or not (HEADER_DIR / "darknet.h").is_file():
        pytest.skip("needs a C compiler and Debian's darknet (apt-get install darknet gcc)")
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "darknet.h"', "int main(void) {"]
    for c_name, struct in (("layer", LAYER), ("network", NETWORK)):
        lines.append(f'printf("{c_name} sizeof %zu\\n", sizeof({c_name}));')
        lines += [f'printf("{c_name} {f} %zu\\n", offsetof({c_name}, {f}));' for f, _ in struct._fields_]
    lines.append("return 0; }")
    (tmp_path / "offsets.c").write_text("\n".join(lines))
    exe = tmp_path / "offsets"
    subprocess.run([gcc, f"-I{HEADER_DIR}", str(tmp_path / "offsets.c"), "-o", str(exe)], check=True, timeout=120)
    compiled = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines():
        struct_name, field, value = line.split()
        compiled[struct_name, field] = int(value)
    ours = {("layer", "sizeof"): ctypes.sizeof(LAYER), ("network", "sizeof"): ctypes.sizeof(NETWORK)}
    for c_name, struct in (("layer", LAYER), ("network", NETWORK)):
        ours.update({(c_name, f): getattr(struct, f).offset for f, _ in struct._fields_})
    assert len(ours) == 190 + 54 + 2
    assert ours == compiled
    assert (ctypes.sizeof(LAYER), ctypes.sizeof(NETWORK), LAYER.forward.offset, LAYER.output.offset) == (
        1184,
        272,
        16,
        616,
    )


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


def _every_layer(runner, x: np.ndarray, *, loop: bool) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    if loop:
        runner._predict_layers(x, None)
    else:
        runner._predict(x)
    return {lay.name: runner._layer(lay.index) for lay in runner.network.layers}


def _check_bit_exact(runner, name: str) -> None:  # type: ignore[no-untyped-def]
    from repliscope.backends.darknet import reference as ref

    x = ref.letterbox(DARKNET_DATA / name, 416, 416)
    predicted = _every_layer(runner, x, loop=False)
    looped = _every_layer(runner, x, loop=True)
    assert list(looped) == NAMES
    for layer, out in predicted.items():
        assert out.dtype == looped[layer].dtype == np.float32
        assert np.array_equal(out, looped[layer]), f"{name}: {layer} differs"
    # the loop restored *net as network_predict does: network_predict afterwards gives the same again
    again = _every_layer(runner, x, loop=False)
    assert all(np.array_equal(again[k], predicted[k]) for k in predicted)


def test_layer_loop_equals_network_predict_on_dog(runner) -> None:  # type: ignore[no-untyped-def]
    _check_bit_exact(runner, "dog.jpg")


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in SAMPLE_IMAGES if n != "dog.jpg"])
def test_layer_loop_equals_network_predict_on_samples(runner, name: str) -> None:  # type: ignore[no-untyped-def]
    _check_bit_exact(runner, name)


def test_layer_loop_reads_the_layers_as_the_cfg_has_them(runner) -> None:  # type: ignore[no-untyped-def]
    loop = runner.layer_loop()
    assert loop.names == NAMES
    assert loop.kinds.count("CONVOLUTIONAL") == 13 and loop.kinds.count("MAXPOOL") == 6
    assert [k for k in loop.kinds if k not in ("CONVOLUTIONAL", "MAXPOOL")] == [
        "YOLO",
        "ROUTE",
        "UPSAMPLE",
        "ROUTE",
        "YOLO",
    ]


def test_layer_loop_refuses_a_network_that_does_not_match(runner) -> None:  # type: ignore[no-untyped-def]
    """The checks that stand between a wrong layout and a call through a wrong pointer."""
    from repliscope.backends.darknet import lib as dn
    from repliscope.backends.darknet.layer_loop import LayerLoop
    from repliscope.convert.darknet_cfg import load_network_cfg

    at_608 = load_network_cfg(cfg_path(), (608, 608))
    with pytest.raises(FrameworkError, match=r"layer 0 \(convolutional_0\): libdarknet's output is \(16, 416, 416\)"):
        LayerLoop(dn.load_library(), runner._net, at_608)
    fewer = load_network_cfg(cfg_path())
    fewer.layers = fewer.layers[:-1]
    with pytest.raises(FrameworkError, match="libdarknet's network has 24 layers, the cfg 23"):
        LayerLoop(dn.load_library(), runner._net, fewer)


def test_framework_trace_has_one_span_per_layer(runner) -> None:  # type: ignore[no-untyped-def]
    from repliscope.tracing import make_tracer
    from repliscope.tracing.summary import summarize

    tracer = make_tracer("framework", otel=False)
    with tracer.instrument(runner):
        out = runner.infer_outputs(np.zeros((2, 3, 416, 416), np.float32))
    assert out["yolo_16"].shape == (2, 255, 13, 13)
    layer_spans = [s for s in tracer.spans if s.attributes.get("index") is not None]
    assert [s.name for s in layer_spans] == NAMES * 2
    assert {s.level for s in layer_spans} == {"framework"}
    assert layer_spans[0].attributes == {
        "layer": "convolutional_0",
        "op_type": "CONVOLUTIONAL",
        "source": "darknet",
        "index": 0,
    }
    runs = [s for s in tracer.spans if s.name == "darknet.run"]
    assert len(runs) == 2
    for run, first in zip(runs, (0, 24), strict=True):  # every layer inside its image's span, in order
        mine = layer_spans[first : first + 24]
        assert run.start_ns <= mine[0].start_ns and mine[-1].end_ns <= run.end_ns
        assert all(a.end_ns <= b.start_ns for a, b in itertools.pairwise(mine))
    summary = summarize(tracer.spans)
    assert summary.inferences == 2 and len(summary.layers) == 25  # 24 layers + read_outputs
    assert {s.layer for s in summary.top(4)} <= {f"convolutional_{i}" for i in (0, 2, 4, 6, 8, 10, 12, 13, 14, 21)}
    assert sum(s.share for s in summary.layers) > 0.9


def test_h5py_still_works_after_libdarknet_is_loaded(tmp_path: Path) -> None:
    """libdarknet -> OpenCV -> GDAL -> Debian's libhdf5_serial: loaded RTLD_GLOBAL its symbols interposed on h5py's
    bundled HDF5 ("ValueError: Not a datatype" saving a .keras file after any darknet test in the process)."""
    need_darknet()
    pytest.importorskip("h5py")
    probe = (
        "import sys, numpy as np\n"
        "from repliscope.backends.darknet.lib import load_library\n"
        "load_library()\n"
        "import h5py\n"
        "with h5py.File(sys.argv[1], 'w') as f:\n"
        "    f.create_dataset('x', data=np.arange(4, dtype=np.float32))\n"
        "    f.attrs['name'] = 'yolov3-tiny'\n"
        "with h5py.File(sys.argv[1]) as f:\n"
        "    print(f['x'][:].tolist(), f.attrs['name'])\n"
    )
    import sys

    run = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "t.h5")], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-1500:]
    assert run.stdout.strip() == "[0.0, 1.0, 2.0, 3.0] yolov3-tiny"


def test_layer_loop_on_a_resized_network() -> None:
    """At 608 (resize_network; the yolo layers' stale out_w/out_h tolerated) the loop is still network_predict."""
    need_darknet()
    from repliscope.backends.darknet import reference as ref
    from repliscope.backends.darknet.runner import DarknetRunner

    artifact = ModelArtifact(
        path=weights_path(),
        sha256="",
        format="darknet",
        input_name="data",
        input_shape=(-1, 3, 608, 608),
        input_dtype="float32",
        output_names=("yolo_16", "yolo_23"),
        config_path=cfg_path(),
    )
    runner = DarknetRunner(artifact, threads=1, cache_dir=Path("/nonexistent"))
    x = ref.letterbox(DARKNET_DATA / "dog.jpg", 608, 608)
    runner.load()
    predicted = _every_layer(runner, x, loop=False)
    looped = _every_layer(runner, x, loop=True)
    assert looped["yolo_23"].shape == (255, 38, 38)
    assert all(np.array_equal(predicted[k], looped[k]) for k in predicted)

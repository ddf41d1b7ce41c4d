"""Issue 32 item 9: repliscope reads a Darknet .cfg exactly as libdarknet's C parser does, or refuses it, and checks
every value's range BEFORE libdarknet sees the file.

The hostile inputs (``filters=2_55``: Python's ``int()`` reads 255 where C's ``atoi`` reads 2, and libdarknet
aborted; ``width=4_16``: a SIGSEGV; ``stride=0``, ``filters=-16``: an internal error) are each refused with the
section index, the key and the allowed values. Where the production path would reach C, the test runs it in a
subprocess (tests/yolo/_darknet_probe.py), so a crash is a failed assertion, not a dead pytest. Where both parsers
read a value the same (`` 16``, ``16 ``, ``+16``, ``016``, a maxpool without ``size``), repliscope's plan equals
libdarknet's own parse of the same file, field by field.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from repliscope.convert.darknet_cfg import (
    DarknetFormatError,
    Network,
    c_atoi,
    expected_sizes,
    load_network_cfg,
)
from tests.yolo._assets import cfg_path, need_darknet

REPO = Path(__file__).resolve().parents[2]

MINI = """[net]
batch=1
subdivisions=1
width=64
height=64
channels=3

[convolutional]
batch_normalize=1
filters=16
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
filters=18
size=1
stride=1
pad=1
activation=linear

[yolo]
mask=0,1,2
anchors=10,14,23,27,37,58
classes=1
num=3
"""
"""Sections 0..4 = [net], layers 0..3; the maxpool halves the input, so width and height are multiples of 2."""

BRANCHY = """[net]
width=64
height=64
channels=3

[convolutional]
filters=8
size=3
stride=2
pad=1
activation=leaky

[convolutional]
batch_normalize=1
filters=8
size=3
stride=1
pad=1
activation=relu

[shortcut]
from=-2
activation=linear

[maxpool]
stride=2

[upsample]
stride=2

[route]
layers=-1,2

[convolutional]
filters=18
size=1
stride=1
pad=1
activation=logistic

[yolo]
mask=1,2,3
anchors=10.5,14,23,27,37,58,81,82
classes=1
num=4
"""
"""Every supported section; a maxpool without ``size`` (libdarknet: size = stride) and a fractional anchor."""


def edited(tmp_path: Path, old: str, new: str, base: str = MINI, name: str = "hostile.cfg") -> Path:
    assert old in base, old
    path = tmp_path / name
    path.write_bytes(base.replace(old, new, 1).encode("utf-8"))
    return path


def refused(path: Path) -> str:
    with pytest.raises(DarknetFormatError) as info:
        load_network_cfg(path)
    return str(info.value)


HOSTILE = [
    # (old, new, what the error must say)
    (
        "filters=16",
        "filters=2_55",
        [
            "section 1 [convolutional] (layer 0) 'filters'=2_55",
            "atoi reads 2",
            "int() 255",
            "allowed: an integer 1..16384",
        ],
    ),
    (
        "width=64",
        "width=4_16",
        ["section 0 [net] 'width'=4_16", "atoi reads 4", "int() 416", "allowed: an integer 1..8192"],
    ),
    ("stride=2", "stride=0", ["section 2 [maxpool] (layer 1) 'stride'=0 is out of range", "1..64"]),
    ("filters=16", "filters=-16", ["section 1 [convolutional] (layer 0) 'filters'=-16 is out of range", "1..16384"]),
    ("filters=16", " filters = 0x10", ["'filters'=0x10 is not a plain decimal integer", "atoi reads 0"]),
    ("size=3", "size=1e3", ["'size'=1e3 is not a plain decimal integer", "atoi reads 1", "1..63"]),
    ("filters=16", "filters=16abc", ["'filters'=16abc is not a plain decimal integer", "atoi reads 16"]),
    ("size=3", "size=1000000", ["'size'=1000000 is out of range", "allowed: an integer 1..63"]),
    ("filters=16", "filters=2147483648", ["'filters'=2147483648 is out of range", "1..16384"]),
    ("width=64", "width=99999999999999999999", ["'width'=99999999999999999999 is out of range"]),
    ("width=64", "width=0", ["section 0 [net] 'width'=0 is out of range"]),
    ("width=64", "width=63", ["64 x 63: both must be multiples of 2", "allowed: 2, 4, ... up to 8192"]),
    ("height=64", "height=65", ["65 x 64: both must be multiples of 2"]),
    ("channels=3\n", "", ["section 0 [net]: 'channels' is required"]),
    ("subdivisions=1", "subdivisions=0", ["'subdivisions'=0 is out of range", "1..batch (1)"]),
    ("batch=1", "batch=100000", ["batch / subdivisions x time_steps = 100000 / 1 x 1", "allowed: 1..64"]),
    ("classes=1", "classes=0", ["section 4 [yolo] (layer 3) 'classes'=0 is out of range"]),
    ("num=3", "num=0", ["'num'=0 is out of range"]),
    ("mask=0,1,2", "mask=0,1,5", ["'mask'=0,1,5: 5 is out of range", "anchor indices 0..num-1 (2)"]),
    ("mask=0,1,2", "mask=0,1,2,", ["'mask'=0,1,2, has an empty entry (libdarknet reads it as 0)"]),
    ("anchors=10,14,23,27,37,58", "anchors=10,14,23,27,37,58,", ["'anchors'=10,14,23,27,37,58, has an empty"]),
    ("anchors=10,14,23,27,37,58", "anchors=10,14,23,27,37", ["must hold num=3 width,height pairs", "got 5"]),
    ("anchors=10,14,23,27,37,58", "anchors=10,14,23,27,37,0x3a", ["'anchors'=0x3a is not a plain finite decimal"]),
    ("anchors=10,14,23,27,37,58", "anchors=10,14,23,27,37,-58", ["not all positive"]),
    ("classes=1", "classes=1\nmap=/etc/passwd", ["'map'=/etc/passwd: a class map file named by the cfg"]),
    (
        "stride=1\npad=1\nactivation=leaky",
        "stride=1\npad=1\nactivation=leaky\ndontload=1",
        ["'dontload'=1", "allowed: 0"],
    ),
    ("activation=leaky", "activation=leaky\nxnor=1", ["'xnor'=1 is out of range"]),
    ("activation=leaky", "activation=mish", ["'activation'=mish is not supported (allowed: leaky, linear, relu"]),
    ("pad=1\nactivation=leaky", "pad=2\nactivation=leaky", ["'pad'=2 is out of range (allowed: 0 or 1)"]),
    (
        "filters=16",
        "filters=16\nfilters=32",
        ["'filters' is given twice in section 1 [convolutional]", "libdarknet uses the first"],
    ),
    ("filters=16", "filters=", ["'filters=' has no value (libdarknet drops the line"]),
    ("filters=16", "filters", ["expected key=value, got 'filters'"]),
    ("filters=16", "filters=\u00a016", ["the non-ASCII byte 0xc2", "libdarknet removes only spaces, tabs"]),
    ("filters=16", "filters=16\x0c", ["a form feed"]),
    ("filters=16", "fil\x00ters=16", ["a NUL byte"]),
    ("classes=1", "classes=1\njitter=.3x", ["'jitter'=.3x is not a plain finite decimal number"]),
    ("classes=1", "classes=1\njitter=nan", ["'jitter'=nan is not a plain finite decimal number"]),
    (
        "batch=1",
        "batch=1\npolicy=steps\nsteps=1,2\nscales=.1",
        ["policy=steps needs 'steps' and 'scales'", "got 2 and 1"],
    ),
    ("batch=1", "batch=1\npolicy=fancy", ["'policy'=fancy is not supported"]),
    ("batch=1", "batch=1\ninputs=5", ["'inputs'=5 is out of range (allowed: width x height x channels = 12288)"]),
    (
        "filters=18\nsize=1\nstride=1\npad=1",
        "filters=18\nsize=41\nstride=1\npad=0",
        [
            "section 3 [convolutional] (layer 2): size=41 is larger than its 32 x 32 input plus padding 0",
            "allowed: 1..32",
        ],
    ),
]


@pytest.mark.parametrize(("old", "new", "says"), HOSTILE, ids=[h[1].strip()[:40] for h in HOSTILE])
def test_hostile_value_is_refused_naming_section_key_and_allowed(
    tmp_path: Path, old: str, new: str, says: list[str]
) -> None:
    message = refused(edited(tmp_path, old, new))
    assert "hostile.cfg:" in message
    for part in says:
        assert part in message, (part, message)


def test_crlf_line_ends_are_refused_as_libdarknet_cannot_read_them(tmp_path: Path) -> None:
    path = tmp_path / "windows.cfg"
    path.write_bytes(MINI.replace("\n", "\r\n").encode())
    assert "windows.cfg:1: a carriage return (a Windows CRLF line end: convert the file to LF)" in refused(path)


def test_routes_and_shortcuts_must_name_earlier_layers(tmp_path: Path) -> None:
    message = refused(edited(tmp_path, "layers=-1,2", "layers=-1,9", BRANCHY))
    assert "section 6 [route] (layer 5) 'layers'=-1,9: 9 is out of range" in message
    assert "allowed: an earlier layer: -1..-5 or 0..4" in message
    assert "'from'=-9 is out of range" in refused(edited(tmp_path, "from=-2", "from=-9", BRANCHY))
    assert "'from' is required" in refused(edited(tmp_path, "from=-2\n", "", BRANCHY))


def test_huge_input_is_refused_before_allocation(tmp_path: Path) -> None:
    big = edited(tmp_path, "width=64", "width=4096", MINI.replace("height=64", "height=4096"))
    message = refused(big)
    assert "section 2 [maxpool] (layer 1): the layers up to here output 335,544,320 floats per image" in message
    assert "more than the 268,435,456 allowed" in message
    huge = edited(tmp_path, "width=64", "width=8192", MINI.replace("height=64", "height=8192"))
    assert "its workspace (out_h x out_w x size x size x channels) is 1,811,939,328 floats" in refused(huge)


def test_c_atoi_is_glibc_atoi() -> None:
    assert [c_atoi(v) for v in ("2_55", "4_16", " 16", "+016", "-16x", "0x10", "1e3", "", "-")] == [
        2,
        4,
        16,
        16,
        -16,
        0,
        1,
        0,
        0,
    ]
    assert c_atoi("2147483648") == -(2**31) and c_atoi("99999999999999999999") == -1  # (int) LONG_MAX


def test_real_cfg_still_reads() -> None:
    net = load_network_cfg(cfg_path())
    assert (net.width, net.height, net.channels, net.batch) == (416, 416, 3, 1)
    anchors = net.layer("yolo_16").params["anchors"]
    assert isinstance(anchors, list) and anchors[0] == (10.0, 14.0)


# ---- against libdarknet itself (a subprocess each) ----


def probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.yolo._darknet_probe", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def parsed_by_libdarknet(cfg: Path) -> dict[str, object]:
    done = probe("parse", str(cfg))
    assert done.returncode == 0, f"libdarknet died parsing {cfg}: {done.returncode}\n{done.stderr[-2000:]}"
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def fake_weights(cfg: Path, path: Path) -> Path:
    """A weights file of exactly the size the cfg needs (values in [0, 1): variances non-negative)."""
    floats = sum(n for _, n in expected_sizes(load_network_cfg(cfg)))
    header = np.asarray([0, 2, 0], "<i4").tobytes() + np.asarray([0], "<u8").tobytes()
    path.write_bytes(header + np.random.default_rng(0).random(floats, dtype=np.float32).tobytes())
    return path


def as_plan(net: Network) -> dict[str, object]:
    """repliscope's plan in the probe's terms."""
    rows = []
    for lay in net.layers:
        p = lay.params
        row: dict[str, object] = {"type": lay.type, "out": list(lay.out_shape), "batch": net.batch}
        if lay.type == "convolutional":
            row |= {k: p[k] for k in ("filters", "size", "stride", "pad", "batch_normalize", "activation")}
        elif lay.type == "maxpool":
            row |= {k: p[k] for k in ("size", "stride", "padding")}
        elif lay.type == "upsample":
            row |= {"stride": p["stride"], "scale": p["scale"]}
        elif lay.type in ("route", "shortcut"):
            key = "layers" if lay.type == "route" else "from"
            row[key] = p[key]
        elif lay.type == "yolo":
            anchors: list[tuple[float, float]] = p["anchors"]  # type: ignore[assignment]
            row |= {"classes": p["classes"], "mask": p["mask"], "anchors": [list(a) for a in anchors]}
        rows.append(row)
    return {"input": [net.channels, net.height, net.width], "batch": net.batch, "layers": rows}


SAME_READING = [
    ("filters=16", "filters= 16"),
    ("filters=16", "filters=16 "),
    ("filters=16", "filters =\t16"),
    ("filters=16", "filters=+16"),
    ("filters=16", "filters=016"),
    ("anchors=10,14,23,27,37,58", "anchors = 10, 14,  23,27, 37,58"),
    ("size=2\nstride=2", "stride=2"),
    ("batch=1\nsubdivisions=1", "batch=64\nsubdivisions=16"),
    ("batch=1", "batch=1\nlearning_rate=1e-3\nmomentum=.9"),
]


@pytest.mark.parametrize(("old", "new"), SAME_READING, ids=[n.replace("\n", ";") for _, n in SAME_READING])
def test_plan_equals_libdarknets_parse_where_both_read_the_same(tmp_path: Path, old: str, new: str) -> None:
    need_darknet()
    cfg = edited(tmp_path, old, new)
    assert as_plan(load_network_cfg(cfg)) == parsed_by_libdarknet(cfg)


def test_plan_equals_libdarknets_parse_for_every_section_kind(tmp_path: Path) -> None:
    need_darknet()
    cfg = tmp_path / "branchy.cfg"
    cfg.write_text(BRANCHY)
    plan = as_plan(load_network_cfg(cfg))
    assert plan["layers"][3]["size"] == 2  # type: ignore[index]  # a maxpool's default size is its stride
    assert plan == parsed_by_libdarknet(cfg)


@pytest.mark.parametrize("name", ["yolov3.cfg", "yolov3-tiny.cfg", "yolov3-spp.cfg", "yolov3-voc.cfg"])
def test_plan_equals_libdarknets_parse_for_debians_cfgs(name: str) -> None:
    need_darknet()
    cfg = Path("/usr/share/darknet/cfg") / name
    assert as_plan(load_network_cfg(cfg)) == parsed_by_libdarknet(cfg)


def test_libdarknet_reads_2_55_as_2_which_repliscope_refuses(tmp_path: Path) -> None:
    need_darknet()
    cfg = edited(tmp_path, "filters=16", "filters=2_55")
    assert parsed_by_libdarknet(cfg)["layers"][0]["filters"] == 2  # type: ignore[index]
    assert "atoi reads 2, Python's int() 255" in refused(cfg)


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ("filters=16", "filters=2_55", "'filters'=2_55 is not a plain decimal integer"),
        ("width=64", "width=4_16", "'width'=4_16 is not a plain decimal integer"),
        ("stride=2", "stride=0", "'stride'=0 is out of range"),
        ("filters=16", "filters=-16", "'filters'=-16 is out of range"),
        ("size=3", "size=1000000", "'size'=1000000 is out of range"),
        ("batch=1", "batch=1\nsubdivisions=0", "'subdivisions' is given twice"),
        ("subdivisions=1", "subdivisions=0", "'subdivisions'=0 is out of range"),
    ],
)
def test_the_runner_refuses_before_libdarknet_and_survives(tmp_path: Path, old: str, new: str, says: str) -> None:
    need_darknet()
    good = tmp_path / "good.cfg"
    good.write_text(MINI)
    weights = fake_weights(good, tmp_path / "mini.weights")
    cfg = edited(tmp_path, old, new)
    done = probe("runner", str(cfg), str(weights), "3", "64", "64")
    assert done.returncode == 0, f"the process died: {done.returncode}\n{done.stderr[-2000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert says in result["error"] and "hostile.cfg" in result["error"], result


def test_the_runner_loads_the_unedited_cfg(tmp_path: Path) -> None:
    need_darknet()
    good = tmp_path / "good.cfg"
    good.write_text(MINI)
    done = probe("runner", str(good), str(fake_weights(good, tmp_path / "mini.weights")), "3", "64", "64")
    assert done.returncode == 0 and json.loads(done.stdout.strip().splitlines()[-1]) == {"loaded": True}, done

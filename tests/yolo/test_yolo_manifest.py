"""examples/yolov3-tiny.yaml validates; source.format darknet needs its .cfg (and only darknet takes one); the
framework 'darknet' is the Debian package; the native runtime of a darknet manifest is darknet."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from repliscope.errors import ManifestError
from repliscope.manifest.loader import load_manifest
from repliscope.runtimes import native_runtime
from tests.yolo._assets import MANIFEST


def test_example_loads_with_its_ops() -> None:
    loaded = load_manifest(MANIFEST)
    m = loaded.manifest
    assert (m.framework.name, m.source.format) == ("darknet", "darknet")
    assert m.source.config is not None and m.source.config.uri.endswith("yolov3-tiny.cfg")
    assert [p["op"] for p in m.postprocess] == [
        "yolo_decode",
        "darknet_correct_boxes",
        "darknet_nms",
        "darknet_boxes",
        "class_map",
    ]
    assert native_runtime("darknet") == "darknet"


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    text = MANIFEST.read_text()
    assert text.count(old) == 1
    p = tmp_path / "m.yaml"
    p.write_text(text.replace(old, new))
    return p


def test_darknet_source_needs_its_cfg(tmp_path: Path) -> None:
    start = MANIFEST.read_text().index("  config:")
    end = MANIFEST.read_text().index("inputs:")
    p = _variant(tmp_path, MANIFEST.read_text()[start:end], "\n")
    with pytest.raises(ManifestError, match=re.escape("give 'config: {uri, sha256}'")):
        load_manifest(p)


def test_only_darknet_takes_a_cfg(tmp_path: Path) -> None:
    p = _variant(tmp_path, "  format: darknet\n", "  format: onnx\n")
    with pytest.raises(ManifestError, match=re.escape("'config' is the .cfg of a darknet source")):
        load_manifest(p)

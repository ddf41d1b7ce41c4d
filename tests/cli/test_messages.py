"""Messages of issue 35 ("Importers and help"): a converted model's runtime line names what it was converted
from (before: "converted from ? by" for a darknet source, whose converter info did not say)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from repliscope.backends import CONVERSIONS
from repliscope.cli.output import _conversion
from repliscope.registry import Registry
from repliscope.runtimes.base import ModelArtifact
from repliscope.runtimes.loaders import Conversion, chain


class _Darknet(Conversion):
    """The darknet -> ONNX conversion's info as ``convert.darknet_onnx`` returns it (no "from"), without libdarknet
    or a network: writes a stand-in file."""

    source, target = "darknet", "onnx"

    def cache_path(self, artifact: ModelArtifact, cache_dir: Path) -> Path:
        return cache_dir / "net.onnx"

    def inputs(self, artifact: ModelArtifact) -> dict[str, Any]:
        return {"weights_sha256": artifact.sha256}

    def convert(self, artifact: ModelArtifact, out: Path) -> dict[str, Any]:
        out.write_bytes(b"onnx")
        return {"converter": "repliscope.convert.darknet_onnx", "converter_version": "3", "opset": 13}

    def verify(self, written: Path) -> None:
        pass


def test_a_darknet_conversion_line_names_its_source(tmp_path: Path) -> None:
    assert "darknet->onnx" in CONVERSIONS.names()
    registry: Registry[Conversion] = Registry("conversion")
    registry.add("darknet->onnx", _Darknet())
    weights = tmp_path / "yolo.weights"
    weights.write_bytes(b"w")
    artifact = ModelArtifact(weights, "b" * 64, "darknet", "x", (1, 3, 32, 32), "float32")  # type: ignore[arg-type]
    notes: dict[str, Any] = {}
    chain(artifact, "onnx", tmp_path / "cache", notes, registry)()
    line = _conversion(notes["conversion"])
    assert line == ", converted from darknet by repliscope.convert.darknet_onnx 3"
    assert "?" not in line
    # a record stored before the link named its source says nothing rather than "?"
    old = {k: v for k, v in notes["conversion"].items() if k != "from"}
    assert _conversion(old) == ", converted by repliscope.convert.darknet_onnx 3"

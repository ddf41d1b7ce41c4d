"""repliscope's reader of Darknet's .cfg / .weights: shapes as Darknet computes them and the bad-input errors
(unknown section with its line, truncated weights with expected vs actual size, cfg/weights mismatch at the
layer where the counts diverge)."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.convert.darknet_cfg import DarknetFormatError, load_network_cfg, read_weights
from tests.yolo._assets import cfg_path, weights_path


def test_yolov3_tiny_plan_and_weights() -> None:
    net = load_network_cfg(cfg_path())
    assert [x.name for x in net.layers if x.type == "yolo"] == ["yolo_16", "yolo_23"]
    assert net.layer("maxpool_11").out_shape == (512, 13, 13)  # the stride-1 padded maxpool keeps 13x13
    assert net.layer("route_20").out_shape == (384, 26, 26)
    w = read_weights(weights_path(), net)
    assert w.version == (0, 2, 0) and w.seen == 32013312 and len(w.layers) == 13
    assert w.layers["convolutional_12"].kernel.shape == (1024, 512, 3, 3)


def test_unknown_section_names_it_and_its_line(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.cfg"
    cfg.write_text(cfg_path().read_text().replace("[upsample]", "[upsampel]"))
    with pytest.raises(DarknetFormatError, match=r"bad\.cfg:153: unknown cfg section \[upsampel\]"):
        load_network_cfg(cfg)


def test_truncated_weights_expected_vs_actual(tmp_path: Path) -> None:
    short = tmp_path / "short.weights"
    short.write_bytes(weights_path().read_bytes()[:20_000_000])
    with pytest.raises(DarknetFormatError) as info:
        read_weights(short, load_network_cfg(cfg_path()))
    assert "20000000 bytes, the cfg needs 35434956" in str(info.value)
    assert "ends inside layer 12 (convolutional_12" in str(info.value)


def test_cfg_weights_mismatch_names_the_layer(tmp_path: Path) -> None:
    cfg = tmp_path / "wide.cfg"
    text = cfg_path().read_text()
    cut = text.index("filters=256", text.index("###########"))
    cfg.write_text(text[:cut] + "filters=320" + text[cut + len("filters=256") :])
    with pytest.raises(DarknetFormatError, match=r"diverge at layer 13 \(convolutional_13"):
        read_weights(weights_path(), load_network_cfg(cfg))

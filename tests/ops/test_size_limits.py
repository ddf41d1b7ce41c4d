"""Issue 20 item 6 at run time: ops refuse outputs over max_pixels before allocating, a dataset file over the size
limit is refused by fstat before reading (a 3 GiB sparse .jpg used 6.6 GB), a batch over the tensor budget is
refused before the loop."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from repliscope.datasets.base import read_file, read_sample
from repliscope.errors import RepliscopeError, SampleError
from repliscope.evaluation.run import check_batch_budget
from repliscope.runtimes.base import ModelArtifact
from tests.ops._helpers import hwc_item, pre, smooth_rgb


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {
                "op": "resize",
                "size": 40000,
                "keep_aspect_ratio": True,
                "method": "bilinear",
                "library": "opencv",
                "antialias": False,
            },
            "'resize' would make a 60000x40000 image (2,400,000,000 pixels), more than the 89,478,485-pixel limit "
            "(max_pixels, $REPLISCOPE_MAX_PIXELS)",
        ),
        (
            {"op": "center_crop", "size": [20000, 20000], "fill": 0},
            "'center_crop' would make a 20000x20000 image (400,000,000 pixels), more than the 89,478,485-pixel limit",
        ),
        (
            {
                "op": "letterbox",
                "size": [10000, 10000],
                "method": "bilinear",
                "library": "opencv",
                "antialias": False,
                "color": [114, 114, 114],
                "position": "center",
                "order": "resize_then_pad",
            },
            "'letterbox' would make a 10000x10000 image (100,000,000 pixels), more than the 89,478,485-pixel limit",
        ),
    ],
)
def test_ops_refuse_huge_outputs_before_allocating(spec: dict[str, Any], message: str) -> None:
    try:
        op = pre(**spec)
    except RepliscopeError as exc:  # a parameter this op's schema needs differently
        pytest.fail(str(exc))
    item = hwc_item(smooth_rgb(20, 30))
    tracemalloc.start()
    try:
        with pytest.raises(SampleError) as ei:
            op(item)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(ei.value) == message if spec["op"] == "resize" else message in str(ei.value)
    assert peak < 10 << 20  # nothing near the output's size was allocated


def test_resize_within_the_limit_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    op = pre(op="resize", size=[40, 60], keep_aspect_ratio=False, method="bilinear", library="opencv", antialias=False)
    assert op(hwc_item(smooth_rgb(20, 30))).data.shape == (40, 60, 3)
    monkeypatch.setenv("REPLISCOPE_MAX_PIXELS", "2399")
    with pytest.raises(SampleError, match="more than the 2,399-pixel limit"):
        op(hwc_item(smooth_rgb(20, 30)))


def test_sparse_3_gib_jpg_is_refused_by_size_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "huge.jpg"
    with big.open("wb") as fh:
        fh.write(b"\xff\xd8\xff\xe0")
        fh.truncate(3 << 30)  # sparse: takes no disk
    tracemalloc.start()
    try:
        with pytest.raises(SampleError) as ei:
            read_file(big)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(ei.value) == (
        "unreadable: the file is over the 268,435,456-byte limit (sample_file_bytes, $REPLISCOPE_SAMPLE_FILE_BYTES)"
    )
    assert peak < 1 << 20
    small = tmp_path / "ok.jpg"
    small.write_bytes(b"abc")
    assert read_file(small) == b"abc"


def test_oversized_sample_is_recorded_as_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from repliscope.datasets.base import Sample

    path = tmp_path / "a.jpg"
    path.write_bytes(b"x" * 100)
    monkeypatch.setenv("REPLISCOPE_SAMPLE_FILE_BYTES", "99")
    got = read_sample(Sample(id="a.jpg", label=0, read=lambda: read_file(path)))
    assert got.data is None
    assert got.error == (
        "unreadable: the file is over the 99-byte limit (sample_file_bytes, $REPLISCOPE_SAMPLE_FILE_BYTES)"
    )


def test_batch_over_the_tensor_budget_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    artifact = ModelArtifact(
        path=Path("m.onnx"),
        sha256="0" * 64,
        format="onnx",
        input_name="input",
        input_shape=(-1, 3, 224, 224),
        input_dtype="float32",
    )
    prepared: Any = SimpleNamespace(artifact=artifact)
    check_batch_budget(prepared, 3000)  # 1.8 GB: within the 2 GiB default
    with pytest.raises(RepliscopeError) as ei:
        check_batch_budget(prepared, 4000)
    assert str(ei.value) == (
        "a batch of 4000 inputs of 602,112 bytes each is 2,408,448,000 bytes, more than the "
        "2,147,483,648-byte tensor budget (tensor_bytes, $REPLISCOPE_TENSOR_BYTES); use a "
        "smaller --batch-size"
    )
    monkeypatch.setenv("REPLISCOPE_TENSOR_BYTES", str(602_112 * 8))
    check_batch_budget(prepared, 8)
    with pytest.raises(RepliscopeError, match="more than the 4,816,896-byte tensor budget"):
        check_batch_budget(prepared, 9)
    assert np.dtype("float32").itemsize == 4

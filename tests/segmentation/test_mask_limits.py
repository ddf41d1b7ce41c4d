"""Issue 32 item 8: a ground-truth mask obeys the pixel limit images obey, checked from the PNG header BEFORE any
pixel is decoded; an oversized mask makes its sample failed, never the run (a 12000² mask used to decode to
gigabytes, a 15000² one raised an uncaught DecompressionBombError that failed the whole job)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, PngImagePlugin

from repliscope.datasets.resolve import resolve_dataset
from repliscope.datasets.voc_seg import read_mask_png
from repliscope.errors import SampleError
from repliscope.evaluation.run import RunSettings, evaluate, prepare
from repliscope.limits import MAX_PIXELS
from tests.segmentation._data import write_voc

MANIFEST = Path(__file__).parents[1] / "fixtures" / "segmentation" / "colour-segmenter.yaml"


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def huge_palette_png(path: Path, side: int) -> Path:
    """A real ``side`` x ``side`` 1-bit palette PNG, streamed row by row: tens of kilobytes on disk, never held
    decoded in memory here."""
    row = b"\x00" + bytes((side + 7) // 8)  # filter byte 0, then every pixel index 0
    packer = zlib.compressobj(9)
    idat = b"".join(packer.compress(row) for _ in range(side)) + packer.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 1, 3, 0, 0, 0)  # bit depth 1, colour type 3 (palette)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"PLTE", b"\x00\x00\x00\x80\x00\x00")
        + _chunk(b"IDAT", idat)
        + _chunk(b"IEND", b"")
    )
    return path


@pytest.fixture
def decoded_sizes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The size of every PNG whose pixels were decoded (``load``) while the test ran."""
    sizes: list[tuple[int, int]] = []
    real_load = PngImagePlugin.PngImageFile.load

    def load(self: PngImagePlugin.PngImageFile) -> Any:
        sizes.append(self.size)
        return real_load(self)

    monkeypatch.setattr(PngImagePlugin.PngImageFile, "load", load)
    return sizes


@pytest.mark.parametrize("side", [12000, 15000])
def test_an_oversized_mask_is_refused_from_its_header(
    tmp_path: Path, side: int, decoded_sizes: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    mask = huge_palette_png(tmp_path / "big.png", side)
    assert mask.stat().st_size < 100_000  # the hostile file is tiny; decoded it would be side² bytes and more
    with monkeypatch.context() as m:  # a real PNG Pillow reads as a palette image of that size (header only)
        m.setattr(Image, "MAX_IMAGE_PIXELS", None)
        with Image.open(mask) as im:
            assert (im.mode, im.size) == ("P", (side, side))
    decoded_sizes.clear()
    with pytest.raises(SampleError) as info:
        read_mask_png(mask)
    assert str(info.value) == (
        f"mask big.png is {side}x{side} = {side * side:,} pixels, over the {MAX_PIXELS.value:,}-pixel limit "
        f"(max_pixels, $REPLISCOPE_MAX_PIXELS); it was not decoded"
    )
    assert decoded_sizes == []


def test_the_limit_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mask = huge_palette_png(tmp_path / "m.png", 64)
    assert read_mask_png(mask).shape == (64, 64)
    monkeypatch.setenv("REPLISCOPE_MAX_PIXELS", "4000")
    with pytest.raises(SampleError, match=r"mask m.png is 64x64 = 4,096 pixels, over the 4,000-pixel limit"):
        read_mask_png(mask)


@pytest.mark.parametrize("side", [12000, 15000])
def test_a_run_with_an_oversized_mask_fails_that_sample_and_scores_the_others(
    tmp_path: Path, side: int, decoded_sizes: list[tuple[int, int]]
) -> None:
    voc = write_voc(tmp_path / "voc")
    huge_palette_png(voc / "SegmentationClass" / "b.png", side)
    prepared = prepare(MANIFEST, RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp_path))
    decoded_sizes.clear()
    record = evaluate(prepared, resolve_dataset(f"voc_seg:{voc}"))
    assert record.counts == {"total": 4, "evaluated": 3, "failed": 1, "labelled": 4}
    failed = {s.sample_id: s.error for s in record.samples if s.error is not None}
    assert failed == {
        "b.jpg": f"mask b.png is {side}x{side} = {side * side:,} pixels, over the {MAX_PIXELS.value:,}-pixel "
        "limit (max_pixels, $REPLISCOPE_MAX_PIXELS); it was not decoded"
    }
    assert {m.name: m.value for m in record.metrics}["mIoU"] == 1.0  # the three others are scored (exactly)
    assert all(w * h <= MAX_PIXELS.value for w, h in decoded_sizes) and decoded_sizes

"""The query sample library refuses to pre-process more than half of the available memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from repliscope.bench import qsl as qsl_module
from repliscope.bench.qsl import QuerySampleLibrary, available_memory_bytes, check_library_fits
from repliscope.errors import RepliscopeError

GIB = 2**30


def test_library_of_half_the_memory_is_refused_naming_the_sizes_and_limit() -> None:
    # 1000 x (3, 224, 224) float32 = 602,112,000 bytes = 0.56 GiB > half of 1 GiB
    with pytest.raises(
        RepliscopeError,
        match=r"1000 pre-processed samples of \(3, 224, 224\) float32 = 0\.6 GiB "
        r"in memory, more than half of the 1\.0 GiB available: .*--limit N",
    ):
        check_library_fits(1000, (3, 224, 224), "float32", GIB)
    check_library_fits(1000, (3, 224, 224), "float32", 2 * GIB)  # 0.56 <= 1.0 GiB
    check_library_fits(1000, (3, 224, 224), "uint8", GIB)  # a quarter of the bytes: 0.14 GiB
    check_library_fits(10**9, (3, -1, 224), "float32", GIB)  # a dynamic axis: size unknown, not checked
    check_library_fits(10**9, (3, 224, 224), "float32", None)  # memory unknown: not checked


def test_load_checks_before_reading_any_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(qsl_module, "available_memory_bytes", lambda: 1000)
    never_read: list[Any] = [object()] * 3  # reading one would fail differently
    with pytest.raises(RepliscopeError, match="3 pre-processed samples"):
        QuerySampleLibrary.load(None, never_read, (3, 224, 224), False)  # type: ignore[arg-type]
    with pytest.raises(Exception) as other:  # timed mode holds encoded files: no size check, reading fails
        QuerySampleLibrary.load(None, never_read, (3, 224, 224), True)  # type: ignore[arg-type]
    assert "pre-processed samples" not in str(other.value)


def test_available_memory_is_memavailable_in_bytes() -> None:
    meminfo = Path("/proc/meminfo")
    if not meminfo.exists():
        pytest.skip("no /proc/meminfo")
    kib = next(int(line.split()[1]) for line in meminfo.read_text().splitlines() if line.startswith("MemAvailable:"))
    got = available_memory_bytes()
    assert got is not None and abs(got - kib * 1024) < 256 * 2**20  # read moments apart

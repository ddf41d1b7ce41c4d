"""Resolve a manifest source URI to a verified local file.

Schemes: ``package://DIST/path/inside/dist`` (a file of an installed distribution, found through
importlib.metadata without importing the package), a path relative to the manifest, or ``https://...``
(fetched into the cache only when ``allow_download``; the sha256 is always checked). A mismatch refuses.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from repliscope.errors import ChecksumError, SourceError

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def verify_sha256(path: Path, expected: str, what: str) -> None:
    actual = sha256_file(path)
    if actual != expected:
        raise ChecksumError(
            f"{what}: sha256 of {path} is {actual}, the manifest declares {expected}; refusing to run "
            "a file that is not the one the manifest describes"
        )


def locate_package_file(uri: str) -> Path:
    """``package://DIST/sub/path`` -> the installed file (the distribution is not imported)."""
    rest = uri.removeprefix("package://")
    dist_name, _, inner = rest.partition("/")
    if not dist_name or not inner:
        raise SourceError(f"{uri}: expected package://DISTRIBUTION/path/inside/distribution")
    try:
        dist = md.distribution(dist_name)
    except md.PackageNotFoundError as exc:
        raise SourceError(f"{uri}: distribution '{dist_name}' is not installed (pip install {dist_name})") from exc
    path = Path(str(dist.locate_file(inner)))
    if not path.is_file():
        listed = [str(f) for f in (dist.files or []) if not str(f).endswith((".pyc", ".py"))][:10]
        raise SourceError(
            f"{uri}: '{inner}' is not a file of {dist_name} {dist.version} (files include: {', '.join(listed)})"
        )
    return path


def download_to_cache(uri: str, sha256: str, cache_dir: Path, allow_download: bool) -> Path:
    """Return the cached copy of ``uri`` (keyed by sha256), downloading it first if allowed."""
    target = cache_dir / "downloads" / sha256 / Path(uri.split("?")[0]).name
    if target.is_file():
        return target
    if not allow_download:
        raise SourceError(f"{uri} is not in the cache ({target}); pass --download to fetch it")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(uri, timeout=60) as resp:
            while chunk := resp.read(_CHUNK):
                out.write(chunk)
        verify_sha256(Path(tmp), sha256, uri)
        os.replace(tmp, target)
    except (urllib.error.URLError, OSError) as exc:
        raise SourceError(f"cannot download {uri}: {exc} (offline? place the file at {target})") from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def resolve_source(
    uri: str, *, base_dir: Path, sha256: str | None, cache_dir: Path, allow_download: bool = False,
    what: str = "source",
) -> Path:
    """Resolve ``uri`` to a local file and verify its sha256 (when given)."""
    if uri.startswith("package://"):
        path = locate_package_file(uri)
    elif uri.startswith(("https://", "http://")):
        if sha256 is None:
            raise SourceError(f"{what} {uri}: a downloaded file needs a sha256 in the manifest")
        path = download_to_cache(uri, sha256, cache_dir, allow_download)
    elif "://" in uri:
        raise SourceError(f"{what} {uri}: unknown scheme (allowed: package://, https://, a relative path)")
    else:
        path = (base_dir / uri).resolve()
        if not path.is_file():
            raise SourceError(f"{what} {uri}: no such file {path}")
    if sha256 is not None:
        verify_sha256(path, sha256, what)
    return path

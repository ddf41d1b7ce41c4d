"""Issue 20 item 7: ``--download`` against a local HTTPS server on 127.0.0.1 (tests touch loopback only).

The server is allowed through the admin allow-list by its NAME (``localhost``); every other loopback, private or
link-local address, an https -> http redirect, an endless body and a wrong checksum are refused, with errors that
show nothing fetched (no body hash, no cache path, no HTTP status)."""

from __future__ import annotations

import datetime
import hashlib
import http.server
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from repliscope.errors import NotCachedError, SourceError
from repliscope.manifest.sources import resolve_source

BODY = b"the model bytes\n" * 64
BODY_SHA = hashlib.sha256(BODY).hexdigest()


def _self_signed(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.2")),
                ]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


class _Handler(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append(self.path)
        port = self.server.server_address[1]  # type: ignore[index]
        redirects = {
            "/to-http": f"http://localhost:{port}/model.onnx",
            "/to-loopback": f"https://127.0.0.2:{port}/model.onnx",
            "/to-metadata": "https://169.254.169.254/latest/meta-data/iam",
            "/to-file": "/model.onnx",
        }
        if self.path in redirects:
            self.send_response(302)
            self.send_header("Location", redirects[self.path])
            self.end_headers()
        elif self.path in ("/model.onnx", "/wrong.onnx"):
            body = BODY if self.path == "/model.onnx" else b"internal secret " * 8
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/huge-length":
            self.send_response(200)
            self.send_header("Content-Length", str(10 << 30))
            self.end_headers()
        elif self.path == "/endless":
            self.send_response(200)
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b"\0" * 65536)
            except OSError:
                return
        else:
            self.send_response(418)
            self.end_headers()


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    cert, key = _self_signed(tmp_path)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the default TLS context trusts the test certificate
    monkeypatch.setenv("REPLISCOPE_DOWNLOAD_ALLOW_HOSTS", "localhost")
    _Handler.seen = []
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def _get(url: str, cache: Path, sha256: str = BODY_SHA) -> Path:
    return resolve_source(url, base_dir=cache, sha256=sha256, cache_dir=cache, allow_download=True)


def _assert_reveals_nothing(message: str, cache: Path) -> None:
    wrong = hashlib.sha256(b"internal secret " * 8).hexdigest()
    assert str(cache) not in message and wrong not in message and "secret" not in message
    assert "HTTP" not in message and "status" not in message
    assert "Teapot" not in message and "I'm a teapot" not in message


def test_allowed_host_downloads_into_the_cache(server: int, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    got = _get(f"https://localhost:{server}/to-file", cache)
    assert got == cache / "downloads" / BODY_SHA / "to-file" and got.read_bytes() == BODY
    assert _Handler.seen == ["/to-file", "/model.onnx"]
    assert [p.name for p in got.parent.iterdir()] == ["to-file"]  # no .part left


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/to-http", "every hop must be https (a redirect to http:// is refused)"),
        (
            "/to-loopback",
            "'127.0.0.2' is a loopback address, not fetched from (an admin can allow it with "
            "$REPLISCOPE_DOWNLOAD_ALLOW_HOSTS)",
        ),
        (
            "/to-metadata",
            "'169.254.169.254' is a link-local address, not fetched from (an admin can allow it "
            "with $REPLISCOPE_DOWNLOAD_ALLOW_HOSTS)",
        ),
        ("/wrong.onnx", "the file does not match source.sha256; not kept"),
        (
            "/huge-length",
            "the file is larger than the 2,147,483,648-byte limit (download_bytes, $REPLISCOPE_DOWNLOAD_BYTES)",
        ),
        ("/missing", "the server did not send the file"),
    ],
)
def test_hostile_downloads_are_refused(server: int, tmp_path: Path, path: str, message: str) -> None:
    cache = tmp_path / "cache"
    url = f"https://localhost:{server}{path}"
    with pytest.raises(SourceError) as ei:
        _get(url, cache)
    assert str(ei.value) == f"cannot download {url}: {message}"
    _assert_reveals_nothing(str(ei.value), cache)
    assert not list((cache / "downloads").rglob("*.*")) if (cache / "downloads").exists() else True
    assert _Handler.seen[0] == path and len(_Handler.seen) == 1  # the refused hop was never requested


def test_endless_stream_is_aborted_at_the_limit(server: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPLISCOPE_DOWNLOAD_BYTES", str(1 << 20))
    cache = tmp_path / "cache"
    url = f"https://localhost:{server}/endless"
    with pytest.raises(SourceError) as ei:
        _get(url, cache)
    assert str(ei.value) == (
        f"cannot download {url}: the file is larger than the 1,048,576-byte limit "
        "(download_bytes, $REPLISCOPE_DOWNLOAD_BYTES); aborted"
    )
    assert [p for p in (cache / "downloads").rglob("*") if p.is_file()] == []  # the .part file is gone


def test_loopback_address_without_the_allow_list_is_never_contacted(
    server: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REPLISCOPE_DOWNLOAD_ALLOW_HOSTS")
    for host in ("localhost", "127.0.0.1", "[::1]"):
        url = f"https://{host}:{server}/model.onnx"
        with pytest.raises(SourceError, match="is a loopback address, not fetched from"):
            _get(url, tmp_path / "cache")
    assert _Handler.seen == []
    monkeypatch.setenv("REPLISCOPE_DOWNLOAD_ALLOW_HOSTS", "127.0.0.0/8")
    assert _get(f"https://127.0.0.1:{server}/model.onnx", tmp_path / "cache").read_bytes() == BODY


def test_plain_http_and_not_cached_errors(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="unknown scheme"):
        resolve_source("http://127.0.0.1:9/x.onnx", base_dir=tmp_path, sha256=BODY_SHA, cache_dir=tmp_path)
    with pytest.raises(NotCachedError) as ei:
        resolve_source("https://example.invalid/x.onnx", base_dir=tmp_path, sha256=BODY_SHA, cache_dir=tmp_path)
    assert str(ei.value) == (
        "https://example.invalid/x.onnx is not in the cache; fetch it once with "
        "`repliscope evaluate MANIFEST --download` (the cache is shared by every command)"
    )

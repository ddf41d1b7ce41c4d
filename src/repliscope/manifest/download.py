"""Fetch an ``https://`` source (``--download`` / ``download: true``) without SSRF or unbounded writes.

Rules, at EVERY hop (the first URL and each redirect, at most :data:`MAX_REDIRECTS`):

- ``https`` only: a redirect to ``http://`` (or any other scheme) is refused;
- the host is resolved first and every address it resolves to must be public: private (10/8, 172.16/12,
  192.168/16, fc00::/7), loopback, link-local (169.254/16 with the cloud metadata service, fe80::/10), multicast,
  reserved and unspecified addresses are refused unless the admin allow-list permits the host name or the address
  (``$REPLISCOPE_DOWNLOAD_ALLOW_HOSTS``: comma-separated names or CIDR networks). The connection then goes to the
  checked address itself (no second lookup a DNS rebinding could answer differently); TLS still verifies the
  certificate for the host name;
- the body is streamed into a ``.part`` file beside the cache entry with its sha256 computed on the way, aborted
  as soon as it passes the size limit (:data:`repliscope.limits.DOWNLOAD_BYTES`, ``$REPLISCOPE_DOWNLOAD_BYTES``; a
  ``Content-Length`` over it is refused before reading), and only renamed into the cache when the sha256 matches.

Errors (:class:`DownloadError`) name the URL as given in the manifest and the rule that refused it; they never
show what was fetched: no response body or its hash, no cache path, no HTTP status of the server, no address of
a refused host beyond its kind.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import ipaddress
import os
import socket
import ssl
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

from repliscope.errors import SourceError
from repliscope.limits import DOWNLOAD_ALLOW_HOSTS_ENV, DOWNLOAD_BYTES

MAX_REDIRECTS = 5
TIMEOUT_SECONDS = 60.0
_CHUNK = 1 << 16
_REDIRECTS = (301, 302, 303, 307, 308)
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class DownloadError(SourceError):
    """A download was refused or failed; the message reveals nothing of what was fetched."""


def allow_list() -> tuple[set[str], list[ipaddress.IPv4Network | ipaddress.IPv6Network]]:
    """(host names, networks) of ``$REPLISCOPE_DOWNLOAD_ALLOW_HOSTS``; a malformed entry is an error."""
    names: set[str] = set()
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for entry in (os.environ.get(DOWNLOAD_ALLOW_HOSTS_ENV) or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        if any(c.isdigit() for c in entry.split("/")[0][:1]) or ":" in entry or "/" in entry:
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                raise DownloadError(
                    f"${DOWNLOAD_ALLOW_HOSTS_ENV}: {entry!r} is neither a host name nor an address/CIDR network"
                ) from None
        names.add(entry.lower().rstrip("."))
    return names, networks


def _kind(address: IpAddress) -> str | None:
    """Why ``address`` may not be fetched from (None: a public address)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return _kind(address.ipv4_mapped)
    for test, kind in (
        (address.is_loopback, "loopback"),
        (address.is_link_local, "link-local"),
        (address.is_private, "private"),
        (address.is_multicast, "multicast"),
        (address.is_unspecified, "unspecified"),
        (address.is_reserved, "reserved"),
    ):
        if test:
            return kind
    return None


def vetted_addresses(host: str, port: int, uri: str, trusted_hosts: frozenset[str] = frozenset()) -> list[str]:
    """The addresses to connect to for ``host``, in resolver order, after checking EVERY resolved address against
    the rules (module docstring). ``trusted_hosts``: host names an admin chose by other means (the package indexes
    of pip's configuration, :mod:`repliscope.manifest.package_index`), allowed like the allow-list's names.
    Raises DownloadError."""
    names, networks = allow_list()
    host_allowed = host.lower().rstrip(".") in names | {h.lower().rstrip(".") for h in trusted_hosts}
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise DownloadError(f"cannot download {uri}: the host name {host!r} does not resolve") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    if not addresses:
        raise DownloadError(f"cannot download {uri}: the host name {host!r} does not resolve")
    for address in addresses:
        kind = _kind(address)
        if kind is None or host_allowed or any(address in net for net in networks):
            continue
        raise DownloadError(
            f"cannot download {uri}: {host!r} is a {kind} address, not fetched from (an admin "
            f"can allow it with ${DOWNLOAD_ALLOW_HOSTS_ENV})"
        )
    return list(dict.fromkeys(str(a) for a in addresses))


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to the first reachable of ``addresses`` (already checked) with TLS verified for the URL's host."""

    def __init__(self, host: str, port: int, addresses: list[str], context: ssl.SSLContext, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._addresses = addresses
        self._context = context

    def connect(self) -> None:
        error: OSError | None = None
        for address in self._addresses:
            try:
                sock = socket.create_connection((address, self.port), self.timeout)
            except OSError as exc:
                error = exc
                continue
            self.sock = self._context.wrap_socket(sock, server_hostname=self.host)
            return
        raise error or OSError("no address")


@contextlib.contextmanager
def _get(
    uri: str, context: ssl.SSLContext, trusted_hosts: frozenset[str], headers: dict[str, str]
) -> Iterator[tuple[http.client.HTTPResponse, str]]:
    """GET ``uri`` under the rules of the module docstring (https at every hop, vetted addresses, at most
    :data:`MAX_REDIRECTS` redirects); yields (the final response, its URL). Raises DownloadError."""
    url = uri
    for _ in range(MAX_REDIRECTS + 1):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            raise DownloadError(
                f"cannot download {uri}: every hop must be https (a redirect to "
                f"{parts.scheme or 'a relative'}:// is refused)"
                if url != uri
                else f"cannot download {uri}: only https:// URLs are fetched"
            )
        try:
            port = parts.port or 443
        except ValueError:
            raise DownloadError(f"cannot download {uri}: a malformed port") from None
        addresses = vetted_addresses(parts.hostname, port, uri, trusted_hosts)
        conn = _PinnedHTTPSConnection(parts.hostname, port, addresses, context, TIMEOUT_SECONDS)
        try:
            path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
            conn.request("GET", path, headers={"User-Agent": "repliscope", "Accept-Encoding": "identity", **headers})
            response = conn.getresponse()
            if response.status in _REDIRECTS:
                location = response.getheader("Location")
                if not location:
                    raise DownloadError(f"cannot download {uri}: a redirect without a location")
                url = urllib.parse.urljoin(url, location)
                continue
            yield response, url
            return
        except (OSError, http.client.HTTPException, ssl.SSLError) as exc:
            raise DownloadError(f"cannot download {uri}: {_why(exc)}") from None
        finally:
            conn.close()
    raise DownloadError(f"cannot download {uri}: more than {MAX_REDIRECTS} redirects")


def fetch(
    uri: str,
    sha256: str,
    target: Path,
    *,
    max_bytes: int | None = None,
    context: ssl.SSLContext | None = None,
    trusted_hosts: frozenset[str] = frozenset(),
) -> Path:
    """Download ``uri`` into ``target`` under the rules of the module docstring; returns ``target``.
    ``context``: the TLS context (default: the system's verified one; tests pass one trusting their own CA);
    ``trusted_hosts``: see :func:`vetted_addresses`."""
    limit = DOWNLOAD_BYTES.value if max_bytes is None else max_bytes
    with _get(uri, context or ssl.create_default_context(), trusted_hosts, {}) as (response, _url):
        if response.status != 200:
            raise DownloadError(f"cannot download {uri}: the server did not send the file")
        return _stream(uri, response, sha256, target, limit)


def fetch_page(
    uri: str,
    *,
    accept: str,
    max_bytes: int,
    context: ssl.SSLContext | None = None,
    trusted_hosts: frozenset[str] = frozenset(),
) -> tuple[int, str, bytes, str]:
    """(HTTP status, content type, body, final URL) of a small document (a package index page) fetched under the
    same rules as :func:`fetch`; a body over ``max_bytes`` is refused. No checksum: the caller parses it."""
    with _get(uri, context or ssl.create_default_context(), trusted_hosts, {"Accept": accept}) as (response, url):
        length = response.getheader("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > max_bytes:
            raise DownloadError(f"cannot download {uri}: the page is larger than {max_bytes:,} bytes")
        body = response.read(max_bytes + 1)
        if len(body) > max_bytes:
            raise DownloadError(f"cannot download {uri}: the page is larger than {max_bytes:,} bytes")
        return response.status, response.getheader("Content-Type") or "", body, url


def _why(exc: BaseException) -> str:
    """A reason that names the failure kind only (no address, path or server text)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return "the server's TLS certificate does not verify"
    if isinstance(exc, ssl.SSLError):
        return "the TLS handshake failed"
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"no answer within {TIMEOUT_SECONDS:.0f} s"
    if isinstance(exc, ConnectionRefusedError):
        return "the connection was refused"
    if isinstance(exc, http.client.HTTPException):
        return "the server's answer is not valid HTTP"
    return "the connection failed"


def _stream(uri: str, response: http.client.HTTPResponse, sha256: str, target: Path, limit: int) -> Path:
    """Stream ``response`` into ``target`` (via a ``.part`` file) with the size limit and the sha256 check."""
    length = response.getheader("Content-Length")
    if length is not None and length.strip().isdigit() and int(length) > limit:
        raise DownloadError(
            f"cannot download {uri}: the file is larger than the {limit:,}-byte limit "
            f"({DOWNLOAD_BYTES.name}, ${DOWNLOAD_BYTES.env})"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".part")
    digest = hashlib.sha256()
    size = 0
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := response.read(_CHUNK):
                size += len(chunk)
                if size > limit:
                    raise DownloadError(
                        f"cannot download {uri}: the file is larger than the {limit:,}-byte limit "
                        f"({DOWNLOAD_BYTES.name}, ${DOWNLOAD_BYTES.env}); aborted"
                    )
                digest.update(chunk)
                try:
                    out.write(chunk)
                except OSError as exc:
                    raise DownloadError(
                        f"cannot download {uri}: writing it to the cache failed ({exc.strerror or type(exc).__name__})"
                    ) from None
        if digest.hexdigest() != sha256:
            raise DownloadError(f"cannot download {uri}: the file does not match source.sha256; not kept")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target

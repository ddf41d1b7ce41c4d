"""Find and fetch ONE archive (an sdist or a wheel) of an exact ``NAME==VERSION`` from the package indexes pip is
configured with, WITHOUT running pip's resolver or any build backend.

``pip download`` of an sdist runs the sdist's build backend (``setup.py`` / ``pyproject.toml``'s backend) to read
its metadata: code chosen by whoever published the package, run by repliscope. So the indexes' files are read
directly instead:

- the indexes are pip's own configuration (``python -m pip config list``: the ``:env:`` entries, then the
  ``download`` section, then ``global``): ``index-url`` (default ``https://pypi.org/simple``, skipped under
  ``no-index``), every ``extra-index-url`` and every ``find-links`` entry, in that order; ``cert`` is the CA bundle
  the TLS connections trust;
- an index is an ``https://`` URL (the PEP 691 JSON API, or the PEP 503 HTML page), a ``file://`` URL or a local
  folder; any other scheme (``http://``) is refused with the entry named. Remote hops follow every rule of
  :mod:`repliscope.manifest.download` (https at every hop and redirect, vetted addresses, size limit, streamed
  sha256); the hosts of the configured indexes and of the files their answers link to are the admin's choice and
  are fetched from even when they resolve to a non-public address (a mirror);
- a file is a candidate when :func:`packaging.utils.parse_sdist_filename` / :func:`parse_wheel_filename` read the
  exact (normalised) name and version from its file name. sdists: ``.tar.gz`` before ``.zip``; wheels: a
  ``py3-none-any`` wheel first, then any other ``none-any`` wheel, then the wheels this interpreter could install
  (in :func:`packaging.tags.sys_tags` order), then the rest; ties by file name, then by index order;
- the archive's sha256 as the index states it (``hashes.sha256`` in JSON, ``#sha256=`` in HTML) is checked while
  streaming; a remote file without one is refused. A local file (``file://``, a folder) is checked when its index
  states a hash.
"""

from __future__ import annotations

import ast
import hashlib
import html.parser
import json
import ssl
import subprocess
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.tags import sys_tags
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from repliscope.errors import SourceError
from repliscope.limits import DOWNLOAD_BYTES
from repliscope.manifest.download import DownloadError, fetch, fetch_page

Kind = Literal["sdist", "wheel"]
PYPI = "https://pypi.org/simple"
PAGE_BYTES = 64 << 20
"""An index page larger than 64 MiB is refused."""
PIP_CONFIG_TIMEOUT_SECONDS = 60
_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
_CHUNK = 1 << 20


class PackageIndexError(SourceError):
    """No archive could be found or fetched; the message names the indexes tried."""


@dataclass(frozen=True)
class IndexConfig:
    """pip's configuration as far as finding files goes."""

    indexes: tuple[str, ...]
    find_links: tuple[str, ...]
    cert: str | None

    def tls_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.cert) if self.cert else ssl.create_default_context()


@dataclass(frozen=True)
class Candidate:
    """One archive an index lists: its file name, URL, the sha256 the index states, the index, its order."""

    filename: str
    url: str
    sha256: str | None
    index: str
    order: int
    trusted_hosts: frozenset[str]


def _pip_settings(python: str) -> dict[str, str]:
    """``python -m pip config list`` as {key: value}, pip's precedence applied (``:env:`` > download > global)."""
    try:
        proc = subprocess.run(
            [python, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=PIP_CONFIG_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PackageIndexError(f"cannot read pip's configuration ('{python} -m pip config list'): {exc}") from None
    if proc.returncode != 0:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:])
        raise PackageIndexError(
            f"cannot read pip's configuration ('{python} -m pip config list' failed: {tail}); repliscope reads "
            "the package indexes pip is configured with"
        )
    ranked: dict[str, tuple[int, str]] = {}
    rank = {":env:": 0, "download": 1, "global": 2}
    for line in proc.stdout.splitlines():
        key, sep, raw = line.partition("=")
        section, dot, name = key.rpartition(".")
        if not sep or not dot or section not in rank:
            continue
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        if name not in ranked or rank[section] < ranked[name][0]:
            ranked[name] = (rank[section], str(value))
    return {name: value for name, (_, value) in ranked.items()}


def read_pip_config(python: str | None = None) -> IndexConfig:
    """The indexes, find-links and CA bundle of pip's configuration (module docstring)."""
    settings = _pip_settings(python or sys.executable)
    no_index = settings.get("no-index", "").strip().lower() in ("1", "true", "yes", "on")
    indexes: list[str] = []
    if not no_index:
        indexes.append(settings.get("index-url", PYPI).strip() or PYPI)
        indexes += settings.get("extra-index-url", "").split()
    return IndexConfig(tuple(indexes), tuple(settings.get("find-links", "").split()), settings.get("cert") or None)


class _Links(html.parser.HTMLParser):
    """The ``<a href>`` targets of a PEP 503 page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _entries(body: bytes, content_type: str, page_url: str) -> list[tuple[str, str, str | None]]:
    """(file name, absolute URL, sha256 or None) of every file a simple page (JSON or HTML) lists."""
    found: list[tuple[str, str, str | None]] = []
    if "json" in content_type:
        try:
            files = json.loads(body)["files"]
        except (ValueError, KeyError, TypeError) as exc:
            raise PackageIndexError(f"{page_url}: not a PEP 691 JSON page ({type(exc).__name__})") from None
        for f in files:
            if isinstance(f, dict) and isinstance(f.get("filename"), str) and isinstance(f.get("url"), str):
                hashes = f.get("hashes")
                sha = hashes.get("sha256") if isinstance(hashes, dict) else None
                url = urllib.parse.urljoin(page_url, f["url"])
                found.append((f["filename"], urllib.parse.urldefrag(url)[0], sha if isinstance(sha, str) else None))
        return found
    parser = _Links()
    parser.feed(body.decode("utf-8", errors="replace"))
    for href in parser.hrefs:
        url, fragment = urllib.parse.urldefrag(urllib.parse.urljoin(page_url, href))
        name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
        sha = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
        found.append((name, url, sha))
    return found


def _local_path(url: str, entry: str) -> Path:
    parts = urllib.parse.urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise PackageIndexError(f"pip index entry {entry!r}: a file:// URL on another host ({parts.netloc}) is refused")
    return Path(urllib.request.url2pathname(parts.path))


def _listing(entry: str, simple: bool, dist: str, context: ssl.SSLContext) -> list[tuple[str, str, str | None]]:
    """The files one configured entry lists for ``dist`` (a simple index when ``simple``, else find-links)."""
    url = entry if "://" in entry else Path(entry).resolve().as_uri()
    scheme = urllib.parse.urlsplit(url).scheme
    name = canonicalize_name(dist)
    if scheme == "https":
        page_url = f"{url.rstrip('/')}/{name}/" if simple else url
        host = urllib.parse.urlsplit(page_url).hostname or ""
        status, content_type, body, final = fetch_page(
            page_url, accept=_ACCEPT, max_bytes=PAGE_BYTES, context=context, trusted_hosts=frozenset({host})
        )
        if status == 404:
            return []
        if status != 200:
            raise PackageIndexError(f"{page_url}: the index answered HTTP {status}")
        entries = _entries(body, content_type, final)
        return [e for e in entries if urllib.parse.urlsplit(e[1]).scheme == "https"]
    if scheme != "file":
        raise PackageIndexError(
            f"pip index entry {entry!r}: only https://, file:// and local folders are read (a {scheme}:// index "
            "is refused)"
        )
    path = _local_path(url, entry)
    if simple:
        page = path / name / "index.html"
        if not page.is_file():
            return []
        return _entries(page.read_bytes(), "text/html", page.as_uri())
    if path.is_dir():
        return [(p.name, p.as_uri(), None) for p in sorted(path.iterdir()) if p.is_file()]
    if path.is_file():
        return _entries(path.read_bytes(), "text/html", path.as_uri())
    return []


def _matches(kind: Kind, filename: str, dist: str, version: Version) -> bool:
    try:
        if kind == "sdist":
            if not filename.endswith((".tar.gz", ".zip")):
                return False
            name, found = parse_sdist_filename(filename)
        else:
            if not filename.endswith(".whl"):
                return False
            name, found, _, _ = parse_wheel_filename(filename)
    except (InvalidSdistFilename, InvalidWheelFilename, InvalidVersion):
        return False
    return name == canonicalize_name(dist) and found == version


def _rank(kind: Kind, c: Candidate) -> tuple[int, int, str, int]:
    """The deterministic preference of the module docstring (lower first)."""
    if kind == "sdist":
        return (0 if c.filename.endswith(".tar.gz") else 1, 0, c.filename, c.order)
    tags = parse_wheel_filename(c.filename)[3]
    names = {str(t) for t in tags}
    if "py3-none-any" in names:
        return (0, 0, c.filename, c.order)
    if any(t.abi == "none" and t.platform == "any" for t in tags):
        return (1, 0, c.filename, c.order)
    priority = {str(t): i for i, t in enumerate(sys_tags())}
    compatible = [priority[n] for n in names if n in priority]
    if compatible:
        return (2, min(compatible), c.filename, c.order)
    return (3, 0, c.filename, c.order)


def find(kind: Kind, dist: str, version: str, config: IndexConfig) -> Candidate:
    """The archive to fetch for ``dist==version`` (module docstring); PackageIndexError naming every index tried."""
    try:
        wanted = Version(version)
    except InvalidVersion:
        raise PackageIndexError(f"{dist}=={version}: '{version}' is not a valid version") from None
    context = config.tls_context()
    candidates: list[Candidate] = []
    failures: list[str] = []
    sources = [(e, True) for e in config.indexes] + [(e, False) for e in config.find_links]
    for order, (entry, simple) in enumerate(sources):
        try:
            listed = _listing(entry, simple, dist, context)
        except DownloadError as exc:
            failures.append(str(exc))
            continue
        hosts = {urllib.parse.urlsplit(entry).hostname or ""}
        for filename, url, sha in listed:
            if _matches(kind, filename, dist, wanted):
                host = urllib.parse.urlsplit(url).hostname or ""
                candidates.append(Candidate(filename, url, sha, entry, order, frozenset(hosts | {host} - {""})))
    if not candidates:
        tried = ", ".join(entry for entry, _ in sources) or "none (no-index and no find-links)"
        failed = f"; failures: {'; '.join(failures)}" if failures else ""
        raise PackageIndexError(
            f"{dist}=={version}: no {kind} of this exact version on the package indexes ({tried}){failed}"
        )
    return min(candidates, key=lambda c: _rank(kind, c))


def _copy_local(candidate: Candidate, target: Path) -> Path:
    """Copy a local archive to ``target`` (bounded by the download limit), checking the index's sha256 if any."""
    source = _local_path(candidate.url, candidate.index)
    limit = DOWNLOAD_BYTES.value
    digest = hashlib.sha256()
    size = 0
    try:
        with source.open("rb") as src, target.open("wb") as out:
            while chunk := src.read(_CHUNK):
                size += len(chunk)
                if size > limit:
                    raise PackageIndexError(
                        f"{candidate.filename}: larger than the {limit:,}-byte limit ({DOWNLOAD_BYTES.name}, "
                        f"${DOWNLOAD_BYTES.env})"
                    )
                digest.update(chunk)
                out.write(chunk)
    except OSError as exc:
        raise PackageIndexError(
            f"{candidate.filename} ({candidate.index}): cannot be read ({exc.strerror or exc})"
        ) from None
    if candidate.sha256 is not None and digest.hexdigest() != candidate.sha256.lower():
        raise PackageIndexError(
            f"{candidate.filename}: its sha256 is {digest.hexdigest()}, the index {candidate.index} states "
            f"{candidate.sha256}; refused"
        )
    return target


def fetch_archive(kind: Kind, dist: str, version: str, into: Path, config: IndexConfig | None = None) -> Path:
    """Fetch the archive :func:`find` chooses into the folder ``into`` (nothing built, nothing installed);
    its path. Raises PackageIndexError / DownloadError."""
    config = config or read_pip_config()
    candidate = find(kind, dist, version, config)
    target = into / candidate.filename
    if urllib.parse.urlsplit(candidate.url).scheme == "file":
        return _copy_local(candidate, target)
    if candidate.sha256 is None:
        raise PackageIndexError(
            f"{candidate.filename}: the index {candidate.index} states no sha256 for it; a remote archive is only "
            "fetched with the index's hash"
        )
    return fetch(
        candidate.url,
        candidate.sha256.lower(),
        target,
        context=config.tls_context(),
        trusted_hosts=candidate.trusted_hosts,
    )

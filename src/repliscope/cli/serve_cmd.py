"""``repliscope serve``: the REST API and web UI (FastAPI + uvicorn, imported only when the command runs)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from repliscope.cli.cluster_cmd import (
    InsecureClusterOption,
    TlsCaOption,
    TlsCertOption,
    TlsKeyOption,
    cluster_security,
)
from repliscope.cli.common import DbOption, fail
from repliscope.errors import RepliscopeError


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` for uvicorn; RepliscopeError when it cannot be bound (in use,
    not an address of this machine, no permission).

    Created with ``proto=IPPROTO_TCP`` (not 0): the sockets ``accept()`` returns inherit the listener's proto, and
    asyncio sets ``TCP_NODELAY`` on a connection only when it is IPPROTO_TCP. Without it every keep-alive
    response waits ~40 ms (Nagle's algorithm against the client's delayed ACK). ``TCP_NODELAY`` is set on the
    listener too (Linux copies it to the accepted sockets)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise RepliscopeError(
            f"cannot serve on {host}:{port}: {exc.strerror or exc} (choose another --port or stop the other server)"
        ) from exc
    return sock


def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on (127.0.0.1: this machine only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8000,
    db: DbOption = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Model exports, conversions and calibrations (default: the CLI's cache).")
    ] = None,
    max_upload_bytes: Annotated[int, typer.Option(min=1, help="Largest accepted request body.")] = 1 << 20,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option("--cors-origin", help="Allow this browser origin (repeatable; default: CORS off)."),
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option(
            help="The Dask scheduler of the agents that run the jobs "
            "(tcp://HOST:PORT; default: an in-process LocalCluster "
            "with one agent)."
        ),
    ] = None,
    tls_ca_file: TlsCaOption = None,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    insecure_cluster: InsecureClusterOption = False,
    allow_architecture_package: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-architecture-package",
            metavar="DIST",
            help="Let uploaded manifests build their model with code of this installed distribution "
            "(architecture.package; repeatable). Default: efficientnet-lite-pytorch only. A general framework "
            "(torch, timm) lets any runner call its public functions with kwargs of their choosing.",
        ),
    ] = None,
    no_default_architecture_packages: Annotated[
        bool,
        typer.Option(
            "--no-default-architecture-packages",
            help="Start the architecture package allowlist empty (only --allow-architecture-package ones).",
        ),
    ] = False,
) -> None:
    """Serve the REST API (/api/v1, OpenAPI at /docs) and the web UI. The first start prints a one-time admin token
    and registers the embedded default dataset foolbox_imagenet."""
    try:
        import uvicorn  # noqa: F401  (the 'service' extra is there)

        from repliscope.service.app import create_app
        from repliscope.service.config import DEFAULT_ARCHITECTURE_PACKAGES, ServiceConfig
        from repliscope.service.startup import DEFAULT_DATASET
    except ImportError as exc:
        print(f"error: repliscope serve needs the 'service' extra: pip install 'repliscope[service]' ({exc})")
        raise typer.Exit(code=2) from None
    sock: socket.socket | None = None
    try:  # bind first: a port in use is an input error, found before a one-time token is created and shown
        security = cluster_security(tls_ca_file, tls_cert, tls_key, insecure_cluster)
        sock = bind_socket(host, port)
        app = create_app(
            ServiceConfig(
                db_url=db,
                cache_dir=cache_dir,
                max_upload_bytes=max_upload_bytes,
                cors_origins=list(cor for cor in cors_origin or []),
                scheduler=scheduler,
                cluster_security=security,
                first_start=True,  # the agents first: a bad --scheduler exits before a one-time token is made
                architecture_packages=(
                    *(() if no_default_architecture_packages else DEFAULT_ARCHITECTURE_PACKAGES),
                    *(allow_architecture_package or []),
                ),
            )
        )
        started = app.state.startup
    except RepliscopeError as exc:
        if sock is not None:
            sock.close()
        fail(exc)
    from repliscope.store.repository import hide_password

    shown = "localhost" if host in ("127.0.0.1", "0.0.0.0") else host
    print(f"repliscope serve: http://{shown}:{port}/  (API docs: http://{shown}:{port}/docs)")
    from repliscope.agents.security import is_loopback

    if not is_loopback(host):
        print(
            f"warning: serving on {host}, reachable from other hosts, over plain HTTP: tokens and the login cookie "
            "travel in clear; put an HTTPS reverse proxy in front (it must pass the Host header, and "
            "X-Forwarded-Proto from 127.0.0.1)",
            file=sys.stderr,
        )
    print(f"database: {hide_password(app.state.store.url)}")
    if started.registered:
        print(f"registered the dataset '{DEFAULT_DATASET}'")
    if started.interrupted:
        print(f"marked {started.interrupted} job(s) left unfinished by a previous server as failed")
    print(started.agents)
    if started.admin_token is not None:
        print(f"admin token (shown once, keep it): {started.admin_token}")
    allowed = app.state.config.architecture_packages
    print(f"architecture packages manifests may use: {', '.join(allowed) or 'none'}")
    uvicorn_server(app).run(sockets=[sock])


KEEP_ALIVE_SECONDS = 75
"""How long an idle keep-alive connection stays open: longer than clients keep one (httpx 5 s, browsers up to
60 s), so the server never closes a connection while a client is sending its next request on it (uvicorn's
default, 5 s, races httpx's own 5 s: the request fails with a read error)."""


GRACEFUL_SHUTDOWN_SECONDS = 3
"""On SIGTERM / SIGINT, how long requests in flight may still finish before uvicorn cancels them (without a bound
uvicorn waits for every open connection, forever for a request stuck in a worker thread)."""


def uvicorn_server(app: Any) -> Any:
    """The uvicorn server ``repliscope serve`` runs ``app`` with, on the socket of :func:`bind_socket` (uvicorn
    picks httptools and uvloop, from the 'service' extra, when they are installed). On SIGTERM / SIGINT it stops
    promptly: every dataset folder walk ends at its next entry (:data:`repliscope.datasets.walk.STOP`, so no worker
    thread holds the process), requests in flight get :data:`GRACEFUL_SHUTDOWN_SECONDS` seconds."""
    import uvicorn

    from repliscope.datasets.walk import STOP

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            STOP.set()
            super().handle_exit(sig, frame)

    return Server(
        uvicorn.Config(
            app,
            log_level="warning",
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        )
    )


def register(app: typer.Typer) -> None:
    """Add the ``serve`` command to ``app``."""
    app.command("serve")(serve)

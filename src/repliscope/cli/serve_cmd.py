"""``repliscope serve``: the REST API and web UI (FastAPI + uvicorn, imported only when the command runs)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

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

if TYPE_CHECKING:
    from repliscope.store.repository import RunStore

DEFAULT_DATASET = "foolbox_imagenet"


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


def first_start(store: RunStore) -> tuple[str | None, bool]:
    """On a fresh store: create a one-time admin token (returned, else None) and register the embedded default
    dataset (True when it was registered now)."""
    from repliscope.store.accounts import create_token, has_admin
    from repliscope.store.service_tables import NotFoundError, get_dataset, register_dataset

    token = None if has_admin(store) else create_token(store, "admin", "admin")
    try:
        get_dataset(store, DEFAULT_DATASET)
        registered = False
    except NotFoundError:
        register_dataset(
            store,
            DEFAULT_DATASET,
            DEFAULT_DATASET,
            "the embedded default: foolbox's ImageNet samples (shipped with repliscope)",
            created_by="repliscope serve",
        )
        registered = True
    return token, registered


def fail_interrupted_jobs(store: RunStore) -> int:
    """Jobs left queued or running by a previous server process (their waiting threads were in it; nothing stores
    their results now): marked failed, saying so. Returns how many."""
    from repliscope.store.service_tables import list_jobs, update_job

    left = [j for status in ("queued", "running") for j in list_jobs(store, status=status, limit=10_000)]
    for job in left:
        update_job(
            store,
            job.id,
            status="failed",
            error="interrupted: the server stopped before the job finished",
            append_log="interrupted: the server stopped before the job finished",
        )
    return len(left)


def connect_agents(app: Any, scheduler: str | None) -> str:
    """Connect the app's cluster now (a bad ``--scheduler`` is found before the server listens) -> the line
    ``repliscope serve`` prints about its agents."""
    from repliscope.service.cluster import NO_AGENTS_EXTRA, dask_available

    if not dask_available():
        if scheduler not in (None, "local"):
            raise RepliscopeError(f"--scheduler: {NO_AGENTS_EXTRA}")
        return "agents: none — the 'agents' extra is not installed, jobs run in this process"
    try:
        agents = app.state.cluster.get().agents()
    except OSError as exc:
        app.state.cluster.close()
        raise RepliscopeError(
            f"cannot connect to the scheduler {scheduler!r}: {exc} (start one with "
            "`dask scheduler`, or leave --scheduler out for an in-process cluster)"
        ) from exc
    alive = sorted(a.capabilities.agent_id for a in agents if a.alive)
    where = f"scheduler {scheduler}" if scheduler not in (None, "local") else "an in-process LocalCluster"
    return f"agents: {len(alive)} live on {where}" + (f" ({', '.join(alive)})" if alive else "")


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
) -> None:
    """Serve the REST API (/api/v1, OpenAPI at /docs) and the web UI. The first start prints a one-time admin token
    and registers the embedded default dataset foolbox_imagenet."""
    try:
        import uvicorn  # noqa: F401  (the 'service' extra is there)

        from repliscope.service.app import create_app
        from repliscope.service.config import ServiceConfig
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
            )
        )
        agents = connect_agents(app, scheduler)  # before the one-time token too: a bad --scheduler exits first
        token, registered = first_start(app.state.store)
        interrupted = fail_interrupted_jobs(app.state.store)
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
    if registered:
        print(f"registered the dataset '{DEFAULT_DATASET}'")
    if interrupted:
        print(f"marked {interrupted} job(s) left unfinished by a previous server as failed")
    print(agents)
    if token is not None:
        print(f"admin token (shown once, keep it): {token}")
    uvicorn_server(app).run(sockets=[sock])


KEEP_ALIVE_SECONDS = 75
"""How long an idle keep-alive connection stays open: longer than clients keep one (httpx 5 s, browsers up to
60 s), so the server never closes a connection while a client is sending its next request on it (uvicorn's
default, 5 s, races httpx's own 5 s: the request fails with a read error)."""


def uvicorn_server(app: Any) -> Any:
    """The uvicorn server ``repliscope serve`` runs ``app`` with, on the socket of :func:`bind_socket` (uvicorn
    picks httptools and uvloop, from the 'service' extra, when they are installed)."""
    import uvicorn

    return uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_keep_alive=KEEP_ALIVE_SECONDS))


def register(app: typer.Typer) -> None:
    """Add the ``serve`` command to ``app``."""
    app.command("serve")(serve)

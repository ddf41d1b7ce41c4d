"""``repliscope cluster certs DIR`` (a CA + scheduler/agent/client certificates for a mutual-TLS cluster, each
bound to its role), ``repliscope cluster scheduler`` (a Dask scheduler that checks those roles) and the
options every command that talks to a Dask scheduler shares: ``--tls-ca-file --tls-cert --tls-key`` and
``--insecure-cluster`` (:func:`cluster_security`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from repliscope.cli.common import fail
from repliscope.errors import RepliscopeError

TlsCaOption = Annotated[
    Path | None,
    typer.Option(
        "--tls-ca-file",
        help="Mutual TLS with the scheduler: the cluster's CA certificate (`repliscope cluster certs DIR`).",
    ),
]
TlsCertOption = Annotated[
    Path | None, typer.Option("--tls-cert", help="Mutual TLS: this process's certificate (PEM, signed by the CA).")
]
TlsKeyOption = Annotated[Path | None, typer.Option("--tls-key", help="Mutual TLS: this process's private key (PEM).")]
InsecureClusterOption = Annotated[
    bool,
    typer.Option(
        "--insecure-cluster",
        help="Allow a plaintext tcp:// "
        "scheduler on another host (anyone reaching it can run code "
        "on the agents; warned).",
    ),
]
ShardsOption = Annotated[
    int | None,
    typer.Option(
        "--shards",
        min=1,
        help="With --scheduler: cut the dataset into N shards (samples I::N), run them at once on the qualifying "
        "agents and store ONE record merged from them (every sample once, metrics over all, the single-machine "
        "result hash).",
    ),
]
AllowMixedStacksOption = Annotated[
    bool,
    typer.Option(
        "--allow-mixed-stacks",
        help="With --shards: merge shards whose stacks differ (versions of python, repliscope, the distributions, "
        "the runtime); the record lists each shard's stack. Refused by default, naming the differing fields.",
    ),
]

cluster_app = typer.Typer(
    help="A cluster: role-bound certificates for mutual TLS between scheduler, agents and clients; its scheduler.",
    no_args_is_help=True,
)


def cluster_security(ca_file: Path | None, cert: Path | None, key: Path | None, insecure: bool) -> Any:
    """The :class:`~repliscope.agents.security.ClusterSecurity` of the shared options (a RepliscopeError when they
    do not go together)."""
    from repliscope.agents.security import ClusterSecurity

    return ClusterSecurity.from_options(ca_file, cert, key, insecure)


@cluster_app.command("certs")
def certs(
    folder: Annotated[
        Path,
        typer.Argument(help="Folder to write ca.pem/ca.key and scheduler, agent, client .pem/.key into (created)."),
    ],
    host: Annotated[
        list[str] | None,
        typer.Option(
            "--host",
            help="Another name or IP the certificates are valid for (repeatable; localhost, 127.0.0.1 and ::1 always).",
        ),
    ] = None,
    days: Annotated[int, typer.Option(min=1, max=3650, help="Validity of the role certificates (days).")] = 825,
    overwrite: Annotated[bool, typer.Option(help="Replace certificates already in FOLDER.")] = False,
) -> None:
    """Make a cluster CA and one certificate per role (scheduler, agent, client), for Dask's mutual TLS: a peer
    without a certificate signed by this CA cannot connect. Keys are written mode 0600; keep ca.key offline."""
    from repliscope.agents.security import make_certs

    try:
        written = make_certs(folder, host or [], days, overwrite)
    except RepliscopeError as exc:
        fail(exc)
    except OSError as exc:
        fail(RepliscopeError(f"cannot write the certificates into {folder}: {exc.strerror or exc}"))
    for name, path in written.items():
        print(f"wrote {path}" + ("  (private key, mode 0600)" if name.endswith(".key") else ""))
    d = folder
    print(
        "\nscheduler: repliscope cluster scheduler --host THIS_HOST_IP "
        f"--tls-ca-file {d}/ca.pem --tls-cert {d}/scheduler.pem --tls-key {d}/scheduler.key"
    )
    print(
        f"agent:     repliscope agent --scheduler tls://SCHEDULER:8786 --host THIS_HOST_IP --tls-ca-file {d}/ca.pem "
        f"--tls-cert {d}/agent.pem --tls-key {d}/agent.key"
    )
    print(
        f"client:    repliscope agents --scheduler tls://SCHEDULER:8786 --tls-ca-file {d}/ca.pem "
        f"--tls-cert {d}/client.pem --tls-key {d}/client.key"
    )


@cluster_app.command("scheduler")
def scheduler(
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="Interface to listen on (default 127.0.0.1; another one needs the --tls-* files or "
            "--insecure-cluster).",
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on (0: a free one).")] = 8786,
    tls_ca_file: TlsCaOption = None,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    insecure_cluster: InsecureClusterOption = False,
) -> None:
    """Run a Dask scheduler for repliscope agents in the foreground (Ctrl-C / SIGTERM stop it). With the --tls-*
    files (scheduler.pem of `repliscope cluster certs`) it speaks mutual TLS and checks each peer's certificate
    role on connect: only a client certificate may submit work, an agent's may only register as a worker.
    Without them it listens on loopback only, unless --insecure-cluster."""
    import logging
    import sys

    from repliscope.agents.cluster import run_scheduler

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s: %(message)s")

    def ready(address: str) -> None:
        print(address, flush=True)
        print(f"scheduler listening on {address}; Ctrl-C or SIGTERM stops it", file=sys.stderr, flush=True)

    try:
        security = cluster_security(tls_ca_file, tls_cert, tls_key, insecure_cluster)
        run_scheduler(host, port, security, on_ready=ready)
    except RepliscopeError as exc:
        fail(exc)
    print("scheduler stopped", file=sys.stderr, flush=True)


def register(app: typer.Typer) -> None:
    """Add ``cluster`` (``cluster certs``) to ``app``."""
    app.add_typer(cluster_app, name="cluster")

"""The service's first start, run when the app is created with ``ServiceConfig(first_start=True)`` (``repliscope
serve`` does): connect the agents' cluster (a bad scheduler fails before anything is written), create a one-time
admin token on a fresh store, register the embedded default dataset, and fail the jobs a previous server process
left unfinished. :func:`first_start` alone (token and dataset) serves tests and benchmarks that build an app."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from repliscope.errors import RepliscopeError
from repliscope.service.executor import INTERRUPTED

if TYPE_CHECKING:
    from repliscope.store.repository import RunStore

DEFAULT_DATASET = "foolbox_imagenet"


@dataclass(frozen=True)
class Startup:
    """What the first start did: ``agents`` (a line about the live agents), ``admin_token`` (the one-time admin
    token, None when the store had an admin), ``registered`` (the default dataset was registered now),
    ``interrupted`` (jobs left by a previous server, marked failed)."""

    agents: str
    admin_token: str | None
    registered: bool
    interrupted: int


def start_service(app: Any) -> Startup:
    """The first start of ``app`` (see the module docstring), in that order: the agents first, so a bad scheduler
    is an error before a one-time token is created (and would never be shown)."""
    store = app.state.store
    agents = connect_agents(app, app.state.config.scheduler)
    token, registered = first_start(store)
    return Startup(agents, token, registered, fail_interrupted_jobs(store))


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
    from repliscope.service.job_log import entries
    from repliscope.store.service_tables import list_jobs, update_job

    left = [j for status in ("queued", "running") for j in list_jobs(store, status=status, limit=10_000)]
    for job in left:
        update_job(store, job.id, status="failed", error=INTERRUPTED, append_log=entries(INTERRUPTED))
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

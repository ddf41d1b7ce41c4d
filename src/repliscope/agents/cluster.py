"""Agents on Dask distributed: an agent is a Dask worker named by its agent id whose :class:`AgentPlugin` puts its
capabilities into the scheduler's metadata (key ``["repliscope-agents", agent_id]``) and refreshes its
``last_seen`` there every :data:`HEARTBEAT_S` seconds. :class:`Cluster` connects to a scheduler (or starts an
in-process one with one agent) and lists the agents with their liveness: alive = among the scheduler's live
workers, gone = in the metadata only (with when it was last seen). Dask is imported inside functions only."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import BaseModel

from repliscope.agents.capabilities import AgentCapabilities, probe_capabilities
from repliscope.agents.security import (
    LOOPBACK_HOST,
    ClusterSecurity,
    agent_listen_host,
    check_cluster_address,
    check_listen_host,
    split_address,
)
from repliscope.errors import RepliscopeError

METADATA_KEY = "repliscope-agents"
PLUGIN_NAME = "repliscope-agent"
HEARTBEAT_S = 5.0
"""How often (seconds) a live agent writes its ``last_seen`` into the scheduler metadata."""

QUIET_DASK_CONFIG: dict[str, object] = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
}
"""Dask's own monitoring, turned down in every scheduler and agent repliscope starts (:func:`quiet_dask`): by
default a worker samples its threads' stacks every 10 ms (for the dashboard's profile page, which an agent serves
on loopback only), times its event loop every 20 ms and polls psutil every 0.5 s. An idle agent then costs 2.5 %
of a core, 0.25 % with these settings; on a machine whose every core runs an agent that is taken from the jobs
(``benchmarks/bench_sharded.py`` prints each process's CPU)."""


class AgentInfo(BaseModel):
    """An agent as the scheduler sees it: ``alive`` (a live worker now), ``last_seen`` (UTC; its last heartbeat,
    or now when alive), ``executing`` (tasks processing on it now; 0 when gone)."""

    capabilities: AgentCapabilities
    address: str
    alive: bool
    last_seen: datetime | None
    executing: int


def quiet_dask() -> contextlib.AbstractContextManager[Any]:
    """:data:`QUIET_DASK_CONFIG` set while a Dask scheduler or worker is created (they read it then)."""
    import dask.config

    return dask.config.set(QUIET_DASK_CONFIG)


def _now() -> str:
    return datetime.now(UTC).isoformat()


class AgentPlugin:
    """Dask ``WorkerPlugin``: on setup, probes the capabilities (agent id = the worker's name) and advertises them
    in the scheduler metadata once the worker is registered; a heartbeat rewrites the entry (fresh ``last_seen``)
    every :data:`HEARTBEAT_S` seconds; a clean stop writes a last ``last_seen``."""

    name = PLUGIN_NAME

    def __init__(self) -> None:
        self.capabilities: AgentCapabilities | None = None
        self.advertised: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def setup(self, worker: Any) -> None:
        self.capabilities = probe_capabilities(str(worker.name))
        self.advertised = asyncio.Event()
        self._task = asyncio.create_task(self._advertise(worker))

    async def _advertise(self, worker: Any) -> None:
        """Once the worker is registered (plugins are set up before: a worker refused for a taken name must not
        overwrite the live agent's entry), put the capabilities in the metadata, then beat every HEARTBEAT_S."""
        from distributed.core import Status

        while worker.status not in (Status.running, Status.paused):
            if worker.status in (Status.closing, Status.closed, Status.failed, Status.closing_gracefully):
                return
            await asyncio.sleep(0.05)
        assert self.capabilities is not None and self.advertised is not None
        caps = self.capabilities.model_dump(mode="json")

        async def beat() -> None:  # the whole entry: a restarted scheduler learns it again
            entry = {"capabilities": caps, "address": worker.address, "last_seen": _now()}
            await worker.scheduler.set_metadata(keys=[METADATA_KEY, str(worker.name)], value=entry)

        await beat()
        self.advertised.set()
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            with contextlib.suppress(Exception):  # a scheduler gone for a moment: the next beat tries again
                await beat()

    async def teardown(self, worker: Any) -> None:
        if self._task is not None:
            self._task.cancel()
        with contextlib.suppress(Exception):
            await worker.scheduler.set_metadata(keys=[METADATA_KEY, str(worker.name), "last_seen"], value=_now())


def agent_plugin() -> Any:
    """A new :class:`AgentPlugin` (a ``distributed.WorkerPlugin``)."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class RepliscopeAgentPlugin(AgentPlugin, WorkerPlugin):
        pass

    return RepliscopeAgentPlugin()


def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


class Cluster:
    """A connection to a Dask scheduler whose workers are agents. Use :meth:`connect`; a context manager."""

    def __init__(self, client: Any, local: Any | None = None, worker: Any | None = None) -> None:
        self.client = client
        self.local = local
        self.worker = worker
        self.address: str = client.scheduler.address
        self.security: ClusterSecurity | None = None
        """The TLS of this connection (None: plaintext); agents this process starts use it too."""
        self.certs_dir: Path | None = None
        """The in-process cluster's own certificates (removed on :meth:`close`)."""

    @classmethod
    def connect(cls, scheduler: str | None, timeout: float = 30.0, security: ClusterSecurity | None = None) -> Cluster:
        """``None`` or ``"local"``: an in-process scheduler (TLS on 127.0.0.1 with certificates made for it, a free
        port, so agent processes this process starts can join it: :func:`local_cluster_security`) with one in-process
        agent (1 thread, agent id ``<hostname>-<pid>``, listening on
        127.0.0.1 too); ``PROTOCOL://HOST:PORT``: that scheduler, checked by :func:`check_cluster_address`
        (``tls://`` with ``security``'s certificates; plaintext only on loopback unless ``security.insecure``). A
        scheduler that does not answer within ``timeout`` seconds is a RepliscopeError."""
        from distributed import Client, LocalCluster, Worker

        from repliscope.agents.capabilities import default_agent_id
        from repliscope.agents.roles import install_role_guard

        if scheduler is None or scheduler == "local":
            import shutil

            own = local_cluster_security()
            dask_security = None if own is None else own[1].dask()
            # the scheduler's HTTP server always binds (default port 8787, a warning when taken): a free port
            with quiet_dask():
                local = LocalCluster(
                    processes=False,
                    n_workers=0,
                    threads_per_worker=1,
                    dashboard_address="127.0.0.1:0",
                    protocol="tcp://" if own is None else "tls://",
                    host=LOOPBACK_HOST,
                    scheduler_port=0,
                    security=dask_security,
                )

            async def start_agent() -> Any:  # host=: Dask's default listens on every interface (0.0.0.0)
                with quiet_dask():
                    worker = Worker(
                        local.scheduler_address,
                        name=default_agent_id(),
                        nthreads=1,
                        plugins=(agent_plugin(),),
                        memory_limit=0,
                        host=LOOPBACK_HOST,
                        dashboard_address=f"{LOOPBACK_HOST}:0",
                        security=dask_security,
                    )
                if dask_security is not None:
                    install_role_guard(worker, "worker")
                return await worker

            try:
                if dask_security is not None:  # the certificates' roles, checked on connect (agents.roles)
                    install_role_guard(local.scheduler, "scheduler")
                worker = local.sync(start_agent)
                cluster = cls(Client(local, set_as_default=False, security=dask_security), local, worker)
            except BaseException:
                local.close()
                if own is not None:
                    shutil.rmtree(own[0], ignore_errors=True)
                raise
            if own is not None:
                cluster.security, cluster.certs_dir = own[1], own[0]
            cluster.wait_for_agents(1, timeout)
            return cluster
        check_scheduler_address(scheduler, local_allowed=True)
        check_cluster_address(scheduler, security)
        if security is not None:
            security.require_role("client", "a client of the scheduler")
        try:
            client = Client(
                scheduler, timeout=f"{timeout}s", set_as_default=False, security=security.dask() if security else None
            )
        except (OSError, TimeoutError) as exc:
            raise RepliscopeError(f"cannot connect to the scheduler {scheduler}: {exc}") from exc
        cluster = cls(client)
        cluster.security = security
        return cluster

    def wait_for_agents(self, n: int, timeout: float = 30.0) -> list[AgentInfo]:
        """Block until at least ``n`` agents are alive (polls every 0.1 s); a RepliscopeError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            alive = [a for a in self.agents() if a.alive]
            if len(alive) >= n:
                return alive
            if time.monotonic() > deadline:
                raise RepliscopeError(
                    f"{len(alive)} live agent(s) on {self.address} after {timeout:.0f} s, waited for {n}"
                )
            time.sleep(0.1)

    def agents(self) -> list[AgentInfo]:
        """Every agent the scheduler has seen, sorted by agent id: alive ones (live workers now) and gone ones."""
        meta = self.client.get_metadata([METADATA_KEY], default={}) or {}
        workers = self.live_workers()
        live = {str(w.get("name")): addr for addr, w in workers.items()}
        processing = self.client.processing()
        out = []
        for agent_id, entry in sorted(meta.items()):
            if not isinstance(entry, dict) or "capabilities" not in entry:
                continue
            address = str(entry.get("address", ""))
            alive = live.get(agent_id) == address
            out.append(
                AgentInfo(
                    capabilities=AgentCapabilities.model_validate(entry["capabilities"]),
                    address=address,
                    alive=alive,
                    last_seen=datetime.now(UTC) if alive else _parse_time(entry.get("last_seen")),
                    executing=len(processing.get(address, ())) if alive else 0,
                )
            )
        return out

    def live_workers(self) -> dict[str, dict[str, Any]]:
        """The scheduler's live workers now: address -> info (with ``name``), fetched for this call.

        Not ``client.scheduler_info()``: that refreshes a cache shared by every thread and returns the cache, which
        the client's periodic refresh (without workers) or another thread may replace in between, so that a busy
        submitter saw no worker at all ("no live agent" while every agent was alive)."""
        identity = self.client.sync(self.client.scheduler.identity, n_workers=-1)
        return dict(identity.get("workers") or {})

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()
        if self.local is not None:
            if self.worker is not None:
                with contextlib.suppress(Exception):
                    self.local.sync(self.worker.close)
            with contextlib.suppress(Exception):
                self.local.close()
        if self.certs_dir is not None:
            import shutil

            shutil.rmtree(self.certs_dir, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def local_cluster_security() -> tuple[Path, ClusterSecurity] | None:
    """Certificates made now for an in-process cluster (a private 0700 temporary folder, one CA): its scheduler and
    agent speak TLS on loopback, so that other users of this machine cannot run code in this process through them,
    and agent processes this process starts (stacks) get the files. None when ``cryptography`` is missing (then
    plaintext on loopback, said once as a warning)."""
    import tempfile
    import warnings

    from repliscope.agents.security import make_certs

    try:
        import cryptography  # noqa: F401
    except ImportError:
        warnings.warn(
            "the in-process cluster runs without TLS: install 'cryptography' (the 'agents' extra) so "
            "that other users of this machine cannot connect to it",
            stacklevel=3,
        )
        return None
    folder = Path(tempfile.mkdtemp(prefix="repliscope-cluster-"))
    make_certs(folder, days=30)
    return folder, ClusterSecurity.of_folder(folder)


def check_scheduler_address(address: str, local_allowed: bool) -> None:
    """A RepliscopeError unless ``address`` is ``PROTOCOL://HOST:PORT`` with PROTOCOL one of
    :data:`~repliscope.agents.security.ALLOWED_PROTOCOLS` (or ``local`` when ``local_allowed``), before Dask sees
    it (its own error comes with a traceback). ``inproc://`` is refused: no other process can reach it."""
    from repliscope.agents.security import ALLOWED_PROTOCOLS

    if local_allowed and address == "local":
        return
    local = " (or 'local' for an in-process scheduler)" if local_allowed else ""
    try:
        split_address(address)
    except RepliscopeError:
        raise RepliscopeError(
            f"--scheduler {address!r}: give tcp://HOST:PORT, e.g. tcp://127.0.0.1:8786{local}; the allowed schemes "
            f"are {', '.join(ALLOWED_PROTOCOLS)}"
        ) from None


def run_agent(
    scheduler: str,
    agent_id: str | None,
    nthreads: int = 1,
    on_ready: Callable[[AgentCapabilities, str], None] | None = None,
    death_timeout: float = 60.0,
    host: str | None = None,
    security: ClusterSecurity | None = None,
) -> None:
    """Run an agent (a Dask worker named ``agent_id``, default ``<hostname>-<pid>``, with ``nthreads`` task threads)
    on ``scheduler`` until SIGTERM/SIGINT or the scheduler closes it; ``on_ready(capabilities, address)`` once it
    is registered and advertised. A scheduler unreachable for ``death_timeout`` seconds (at start, or later) stops
    the agent (a RepliscopeError at start). It listens on ``host`` (default: loopback, which a scheduler on another
    machine cannot reach: then ``host`` is required) and its HTTP server on loopback; ``security``: mutual TLS
    (required for a non-loopback plaintext address unless ``security.insecure``)."""
    import logging
    import signal

    from distributed import Worker

    from repliscope.agents.capabilities import default_agent_id
    from repliscope.agents.roles import install_role_guard

    check_scheduler_address(scheduler, local_allowed=False)
    check_cluster_address(scheduler, security)
    host = agent_listen_host(scheduler, host)
    check_listen_host(host, security)  # the scheduler's rule: plaintext on loopback only (or --insecure-cluster)
    if security is not None:
        security.require_role("agent", "an agent")
    name = agent_id or default_agent_id()
    logging.getLogger("distributed").setLevel(logging.WARNING)  # its INFO start-up lines drown what we print
    if nthreads < 1:
        raise RepliscopeError(f"--nthreads must be a positive integer, got {nthreads}")

    async def main() -> None:
        plugin = agent_plugin()
        worker_log = logging.getLogger("distributed.worker")
        level = worker_log.level
        worker_log.setLevel(logging.CRITICAL)  # a failed start is said once, below (Dask logs it as an ERROR too)
        try:
            with quiet_dask():
                worker = Worker(
                    scheduler,
                    name=name,
                    nthreads=nthreads,
                    plugins=(plugin,),
                    memory_limit=0,
                    death_timeout=death_timeout,
                    host=host,
                    dashboard_address=f"{LOOPBACK_HOST}:0",
                    security=security.dask() if security else None,
                )
            if security is not None and security.tls:  # the peers' certificate roles, checked on connect
                install_role_guard(worker, "worker")
            await worker
        except (OSError, TimeoutError, RuntimeError, ValueError) as exc:
            why = f"{exc}" + (f" ({exc.__cause__})" if exc.__cause__ else "")
            if "name taken" in why:
                why = f"an agent named '{name}' is already on that scheduler: give another --name"
            raise RepliscopeError(f"agent {name} could not join the scheduler {scheduler}: {why}") from exc
        finally:
            worker_log.setLevel(level)
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if plugin.advertised is not None:
            await asyncio.wait_for(plugin.advertised.wait(), timeout=30)
        if on_ready is not None and plugin.capabilities is not None:
            on_ready(plugin.capabilities, worker.address)
        finished = asyncio.ensure_future(worker.finished())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({finished, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not finished.done():
            await worker.close(reason="repliscope agent stopped")
        stopped.cancel()

    asyncio.run(main())


def run_scheduler(
    host: str = LOOPBACK_HOST,
    port: int = 8786,
    security: ClusterSecurity | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Run a Dask scheduler for agents on ``host:port`` until SIGTERM/SIGINT; ``on_ready(address)`` once it
    listens. The listener rule of every repliscope listener (:func:`check_listen_host`: plaintext on loopback only,
    unless ``security.insecure``); with TLS (``security``: the scheduler's certificate) the peers' certificate
    roles are checked on connect (:mod:`repliscope.agents.roles`: only a client may submit work). Its HTTP server
    listens on loopback (a free port)."""
    import logging
    import signal

    from distributed import Scheduler

    from repliscope.agents.roles import install_role_guard

    check_listen_host(host, security)
    tls = security is not None and security.tls
    if security is not None:
        security.require_role("scheduler", "the scheduler")
    if not 0 <= port < 65536:
        raise RepliscopeError(f"--port {port}: give 0 (a free port) to 65535")
    logging.getLogger("distributed").setLevel(logging.WARNING)

    async def main() -> None:
        with quiet_dask():
            scheduler = Scheduler(
                host=host,
                port=port,
                protocol="tls://" if tls else "tcp://",
                security=security.dask() if security is not None else None,
                dashboard=False,
                dashboard_address=f"{LOOPBACK_HOST}:0",
            )
        if tls:
            install_role_guard(scheduler, "scheduler")
        try:
            await scheduler
        except (OSError, RuntimeError) as exc:
            why = f"{exc}" + (f" ({exc.__cause__})" if exc.__cause__ else "")
            raise RepliscopeError(f"the scheduler could not listen on {host}:{port}: {why}") from exc
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if on_ready is not None:
            on_ready(scheduler.address)
        finished = asyncio.ensure_future(scheduler.finished())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({finished, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not finished.done():
            await scheduler.close(reason="repliscope scheduler stopped")
        stopped.cancel()

    asyncio.run(main())

"""Certificate roles enforced on connect: every TLS listener of a repliscope cluster (the scheduler, each agent)
reads the role of the peer's verified certificate (:func:`~repliscope.agents.security.role_of_peercert`, the
organizational unit the cluster's CA signed) when the connection opens, refuses a peer without one, and checks
every message the peer sends (top-level operations and the operations of a batched stream) against what that
role may do:

=========  ===========================================  ===============================================
peer       at the scheduler                             at an agent
=========  ===========================================  ===============================================
client     everything but a worker's operations         everything (it could run it through the scheduler)
           (:data:`WORKER_ONLY`: it cannot be an agent)
agent      register as a worker and what a worker       ``get_data`` only (a peer fetching a result)
           sends (:data:`AGENT_AT_SCHEDULER`)
scheduler  nothing                                      everything (it drives the agents)
=========  ===========================================  ===============================================

A refused operation closes the connection before any handler runs, and is logged (logger
``repliscope.agents.roles``). Install with :func:`install_role_guard` (before the server starts, or after: the
running listeners are re-pointed too); ``dask scheduler --preload repliscope.agents.roles`` installs it on a
scheduler started by Dask's own command line."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from repliscope.agents.security import role_of_peercert

logger = logging.getLogger("repliscope.agents.roles")

ServerKind = Literal["scheduler", "worker"]

ALL: frozenset[str] = frozenset({"*"})
"""Every operation."""

WORKER_STREAM: frozenset[str] = frozenset(
    {
        "task-finished",
        "task-erred",
        "release-worker-data",
        "add-keys",
        "long-running",
        "reschedule",
        "keep-alive",
        "log-event",
        "worker-status-change",
        "request-refresh-who-has",
    }
)
"""The operations of a worker's batched stream (distributed.scheduler.Scheduler: worker_handlers)."""

AGENT_AT_SCHEDULER: frozenset[str] = (
    frozenset(
        {
            # requests of a worker (distributed.worker / its plugins) and of the repliscope agent
            "register-worker",
            "unregister",
            "heartbeat_worker",
            "who_has",
            "set_resources",
            "log_event",
            "set_metadata",  # the agent's capabilities and heartbeat (repliscope.agents.cluster.AgentPlugin)
            "event_is_set",  # a job's cancel flag (repliscope.agents.submit.run_on_agent)
            # the end of a connection (distributed.core: a request's and a batched stream's)
            "close",
            "close-stream",
        }
    )
    | WORKER_STREAM
)
"""What an agent's certificate may ask of the scheduler: to be a worker, never a client (``register-client``,
``update-graph``, ``run_function``, ``broadcast``, ``feed``, plugins... are refused)."""

WORKER_ONLY: frozenset[str] = frozenset({"register-worker", "register_nanny", "unregister", "heartbeat_worker"}) | (
    WORKER_STREAM
)
"""What only an agent sends to the scheduler: refused from a client's certificate (it cannot register as a worker
nor report task results)."""

AGENT_AT_WORKER: frozenset[str] = frozenset({"get_data", "close", "close-stream"})
"""What an agent's certificate may ask of another agent: the data of a finished task, nothing that runs code."""

NONE: frozenset[str] = frozenset()

POLICY: dict[ServerKind, dict[str, tuple[frozenset[str], frozenset[str]]]] = {
    # role -> (the operations allowed (ALL: every one), those refused anyway)
    "scheduler": {"client": (ALL, WORKER_ONLY), "agent": (AGENT_AT_SCHEDULER, NONE)},
    "worker": {"client": (ALL, NONE), "scheduler": (ALL, NONE), "agent": (AGENT_AT_WORKER, NONE)},
}


def allowed_ops(kind: ServerKind, role: str | None) -> tuple[frozenset[str], frozenset[str]]:
    """(allowed, refused) operations of a peer of ``role`` at a ``kind`` server (allowed empty: the connection is
    refused)."""
    if role is None:
        return NONE, NONE
    return POLICY[kind].get(role, (NONE, NONE))


def op_allowed(op: str, allowed: frozenset[str], refused: frozenset[str]) -> bool:
    return op not in refused and (allowed is ALL or op in allowed)


def _ops(msg: Any) -> list[str]:
    """The operation names in one message read from a comm: a request (a dict with ``op``) or a batch of them."""
    items = msg if isinstance(msg, (list, tuple)) else [msg]
    return [str(item["op"]) for item in items if isinstance(item, dict) and "op" in item]


def guard_comm(comm: Any, kind: ServerKind) -> bool:
    """Check ``comm`` (a connection just accepted by a ``kind`` server): False (and the comm aborted) when the
    peer's certificate has no role allowed anything here; else its ``read`` is wrapped so that a message with an
    operation the role may not send aborts the connection (a ``CommClosedError``) before any handler sees it."""
    from distributed.comm.core import CommClosedError

    role = role_of_peercert(comm.extra_info.get("peercert"))
    allowed, denied = allowed_ops(kind, role)
    peer = comm.peer_address
    if not allowed:
        who = f"a '{role}' certificate" if role else "a certificate without a repliscope role"
        logger.warning("refused %s: %s may not connect to the %s", peer, who, kind)
        comm.abort()
        return False
    if allowed is ALL and not denied:
        return True
    read = comm.read

    async def checked_read(*args: Any, **kwargs: Any) -> Any:
        msg = await read(*args, **kwargs)
        refused = [op for op in _ops(msg) if not op_allowed(op, allowed, denied)]
        if refused:
            logger.warning(
                "refused %s: its certificate's role '%s' may not send %s to the %s; connection closed",
                peer,
                role,
                ", ".join(repr(op) for op in refused),
                kind,
            )
            comm.abort()
            raise CommClosedError(f"operation {refused[0]!r} is not allowed for the role '{role}'")
        return msg

    comm.read = checked_read
    return True


def install_role_guard(server: Any, kind: ServerKind) -> None:
    """Make ``server`` (a Dask Scheduler or Worker with TLS) check every accepted connection with
    :func:`guard_comm`: its ``handle_comm`` (used by listeners it starts) and its running listeners."""
    original: Callable[[Any], Awaitable[None]] = server.handle_comm

    async def handle_comm(comm: Any) -> None:
        if guard_comm(comm, kind):
            await original(comm)

    server.handle_comm = handle_comm
    for listener in getattr(server, "listeners", ()):
        listener.comm_handler = handle_comm


def dask_setup(scheduler: Any) -> None:
    """``dask scheduler --preload repliscope.agents.roles``: the role checks on a scheduler Dask's command line
    starts (with its ``--tls-*`` options)."""
    install_role_guard(scheduler, "scheduler")

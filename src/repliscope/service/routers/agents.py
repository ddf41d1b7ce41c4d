"""``/api/v1/agents``: the agents (Dask workers advertising their capabilities) of the service's cluster, with
liveness: alive = a live worker of the scheduler now; gone = advertised earlier, no longer connected (last seen)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Request

from repliscope.agents.cluster import AgentInfo
from repliscope.errors import RepliscopeError
from repliscope.service.auth import require
from repliscope.service.errors import ERROR_RESPONSES, ApiError

if TYPE_CHECKING:
    from repliscope.agents.cluster import Cluster

router = APIRouter(prefix="/agents", tags=["agents"], responses=ERROR_RESPONSES)


def cluster_of(request: Request) -> Cluster:
    """The app's cluster (connected on first use: the in-process LocalCluster or ``--scheduler``'s)."""
    handle = request.app.state.cluster
    try:
        cluster: Cluster = handle.get()
    except (OSError, RepliscopeError) as exc:  # the scheduler went away; no 'agents' extra
        raise ApiError(503, f"the agents cannot be listed: {exc}", code="unavailable") from None
    return cluster


def list_agents(request: Request) -> list[AgentInfo]:
    """Every agent known to the scheduler (alive first, then by id)."""
    agents = cluster_of(request).agents()
    return sorted(agents, key=lambda a: (not a.alive, a.capabilities.agent_id))


@router.get("", response_model=list[AgentInfo])
def get_agents(request: Request, principal: Annotated[Any, Depends(require("viewer"))]) -> Any:
    """The agents with their capabilities (runtimes and exact versions, stack, CPU, cores, memory), liveness,
    executing tasks and when each was last seen. Below the role admin, server paths (a stack's environment, the
    interpreter) read relative to named roots (``<python prefix>/...``) or as ``…/<last two parts>``."""
    from repliscope.service.redaction import hide_paths_in, request_roots

    agents = list_agents(request)
    roots = request_roots(request, principal)
    if roots is None:
        return agents
    return [hide_paths_in(a.model_dump(mode="json"), roots) for a in agents]

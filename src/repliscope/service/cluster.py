"""The service's Dask cluster, connected on first use: a service that never runs a job nor lists its agents
starts no LocalCluster (the tests' many apps stay fast); ``repliscope serve`` connects at start (a bad
``--scheduler`` is found before the server listens)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from repliscope.agents.cluster import Cluster
    from repliscope.agents.security import ClusterSecurity

NO_AGENTS_EXTRA = (
    "agents need the 'agents' extra (Dask distributed), which is not installed: pip install 'repliscope[agents]'"
)


def dask_available() -> bool:
    """Whether the 'agents' extra (``distributed``) is installed (checked without importing it)."""
    from importlib.util import find_spec

    return find_spec("distributed") is not None


class ClusterHandle:
    """``scheduler``: None or ``"local"`` = an in-process LocalCluster whose one worker is an agent;
    ``"tcp://HOST:PORT"`` (or ``tls://`` with ``security``)
    = a running scheduler (``timeout``: seconds to wait for it to answer). ``cluster``: an
    already connected one (the caller closes it; :meth:`close` leaves it open)."""

    def __init__(
        self,
        scheduler: str | None = None,
        cluster: Cluster | None = None,
        timeout: float = 10.0,
        security: ClusterSecurity | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.security = security
        self.timeout = timeout
        self._cluster = cluster
        self._owned = cluster is None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def connected(self) -> bool:
        return self._cluster is not None

    def get(self) -> Cluster:
        """The cluster, connecting now when this is the first use (RepliscopeError/OSError when it cannot)."""
        with self._lock:
            if self._cluster is None:
                from repliscope.errors import RepliscopeError

                if self._closed:
                    raise RepliscopeError("the service is shutting down: its cluster is closed")
                if not dask_available():
                    raise RepliscopeError(NO_AGENTS_EXTRA)
                from repliscope.agents.cluster import Cluster

                self._cluster = Cluster.connect(self.scheduler, timeout=self.timeout, security=self.security)
            return self._cluster

    def close(self) -> None:
        """Close the cluster this handle connected (idempotent)."""
        with self._lock:
            self._closed = True
            cluster, self._cluster = self._cluster, None
        if cluster is not None and self._owned:
            cluster.close()

"""``ServiceConfig``: what one service instance runs on (database, cache, limits, CORS, executor)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from repliscope.agents.cluster import Cluster
    from repliscope.agents.security import ClusterSecurity
    from repliscope.service.executor import JobExecutor, UnplacedExecutor

DEFAULT_ARCHITECTURE_PACKAGES: tuple[str, ...] = ("efficientnet-lite-pytorch",)
"""The packages a server loads architecture code (a manifest's ``architecture.factory``) from unless its admin says
otherwise: the one the bundled EfficientNet-Lite examples name, whose single module ``efficientnet_lite_pytorch``
holds model code only. A general framework (``torch``, ``torchvision``, ``timm``) can do far more than build a model
with the kwargs a runner chose: allow it only for runners you trust."""

DEFAULT_MAX_UPLOAD_BYTES = 1 << 20
"""1 MiB, the manifest loader's own limit (:data:`repliscope.manifest.loader.MAX_MANIFEST_BYTES`)."""


@dataclass
class ServiceConfig:
    """``db_url``: SQLAlchemy URL (None: the CLI's default store). ``cache_dir``: model exports, conversions and
    calibrations (None: the CLI's default cache). ``cors_origins``: empty = CORS off (no header is ever sent).
    ``scheduler``: the Dask scheduler of the agents (``tcp://HOST:PORT``; None or ``local``: an in-process
    LocalCluster whose one worker is an agent). ``cluster``: an already connected cluster to use instead (the
    caller closes it). ``cluster_security``: mutual TLS to ``scheduler`` (``tls://``).
    ``architecture_packages``: the distributions (names, any spelling; stored canonical) a manifest's
    ``architecture.package`` may name on this server (default :data:`DEFAULT_ARCHITECTURE_PACKAGES`; ``repliscope
    serve --allow-architecture-package``). Any other package, and every ``architecture.path`` (a local module
    folder), is refused at upload (``POST /api/v1/manifests``) and at job submission with a 422 naming the field
    (:func:`repliscope.manifest.code_refs.check_allowlisted`); the agent's loader then resolves the factory inside
    that package only.
    ``executor``: None builds a :class:`~repliscope.service.executor.DaskJobExecutor` on the app's store and
    cluster (one without ``check`` accepts every job at submission). ``first_start``: run the service's first start
    when the app is created (connect the agents, a one-time admin token on a fresh store, the default dataset, fail
    the jobs a previous server left: :func:`repliscope.service.startup.start_service`; what it did is
    ``app.state.startup``)."""

    db_url: str | None = None
    cache_dir: Path | None = None
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    cors_origins: list[str] = field(default_factory=list)
    scheduler: str | None = None
    cluster: Cluster | None = None
    cluster_security: ClusterSecurity | None = None
    executor: JobExecutor | UnplacedExecutor | None = None
    mount_web: bool = True
    first_start: bool = False
    architecture_packages: tuple[str, ...] = DEFAULT_ARCHITECTURE_PACKAGES

    def __post_init__(self) -> None:
        from repliscope.errors import RepliscopeError
        from repliscope.manifest.code_refs import normalize_allowlist

        try:
            self.architecture_packages = normalize_allowlist(self.architecture_packages)
        except ValueError as exc:
            raise RepliscopeError(str(exc)) from None

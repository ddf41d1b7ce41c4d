"""``create_app(config)``: the FastAPI application (``/api/v1`` + the web UI), OpenAPI at ``/docs`` (Swagger UI),
``/redoc`` and ``/openapi.json``, served without a CDN (:mod:`repliscope.service.api_docs`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI
from pydantic import BaseModel

from repliscope.service.auth import require
from repliscope.service.config import ServiceConfig
from repliscope.service.errors import ERROR_RESPONSES, install
from repliscope.service.guard import RequestGuard

API_PREFIX = "/api/v1"


class Whoami(BaseModel):
    name: str
    role: str


class Health(BaseModel):
    status: str
    version: str


def _api_router() -> APIRouter:
    from repliscope.service.routers import (
        agents,
        annotations,
        benchmarks,
        datasets,
        diffs,
        jobs,
        manifests,
        models,
        runs,
        stack_matrices,
        tokens,
    )

    api = APIRouter(prefix=API_PREFIX)
    for module in (manifests, models, jobs, runs, benchmarks, datasets, tokens, agents, stack_matrices, diffs):
        api.include_router(module.router)
    api.include_router(annotations.router)  # tags, notes, rename, delete, audit

    @api.get("/whoami", response_model=Whoami, tags=["accounts"], responses=ERROR_RESPONSES)
    def whoami(principal: Annotated[Any, Depends(require("viewer"))]) -> Any:
        """The caller's token name and role."""
        return {"name": principal.name, "role": principal.role}

    @api.get("/health", response_model=Health, tags=["accounts"])
    def health() -> Any:
        """Liveness (no token needed)."""
        from repliscope import __version__

        return {"status": "ok", "version": __version__}

    return api


def create_app(config: ServiceConfig | None = None) -> FastAPI:
    """The app on ``config``'s store (opened, and migrated, now) with its job executor: by default a
    :class:`~repliscope.service.executor.DaskJobExecutor` on ``config.scheduler``'s cluster (None: an in-process
    LocalCluster, started on first use and closed on shutdown); without the 'agents' extra a
    :class:`~repliscope.service.executor.ThreadJobExecutor` (``repliscope serve`` says so; ``/api/v1/agents`` is a
    503 naming the extra). With ``config.first_start`` the service's first start runs now
    (:func:`repliscope.service.startup.start_service`; RepliscopeError when the agents' scheduler is unreachable)."""
    from repliscope import __version__
    from repliscope.service.cluster import ClusterHandle, dask_available
    from repliscope.service.executor import DaskJobExecutor, JobExecutor, ThreadJobExecutor, as_job_executor
    from repliscope.store.repository import RunStore

    config = config or ServiceConfig()
    store = RunStore(config.db_url)
    cluster = ClusterHandle(config.scheduler, config.cluster, security=config.cluster_security)
    executor: JobExecutor = (
        as_job_executor(config.executor)
        if config.executor is not None
        else DaskJobExecutor(store, cluster, config.cache_dir)
        if dask_available()
        else ThreadJobExecutor(store, config.cache_dir)
    )

    def stop() -> None:
        executor.shutdown(wait=True)
        cluster.close()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        # blocking (Dask's client closes on its own loop): not on this event loop
        await asyncio.to_thread(stop)

    app = FastAPI(
        title="repliscope",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,  # served by install_docs with local assets (no CDN)
        redoc_url=None,
        description="Check a shared ML model's claims and find why a re-implementation differs: manifests, "
        "jobs (evaluate, pitfalls, bench, diff), stored runs, comparisons and reports. "
        "Authenticate with the header `Authorization: Bearer <token>` (a token from `repliscope token create`; "
        "the Authorize button of `/docs` sends it).",
    )
    app.state.config = config
    app.state.store = store
    app.state.executor = executor
    app.state.cluster = cluster
    install(app)
    from repliscope.service.api_docs import install_docs

    install_docs(app, app.title)
    app.include_router(_api_router())
    _favicon(app)
    if config.mount_web:
        _mount_web(app)
    if config.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=config.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(RequestGuard, max_bytes=config.max_upload_bytes)  # added last: the outermost
    app.state.startup = None
    if config.first_start:
        from repliscope.service.startup import start_service

        app.state.startup = start_service(app)
    return app


FAVICON_CACHE = "public, max-age=86400"


def _favicon(app: FastAPI) -> None:
    """``/favicon.ico`` (no token; browsers ask for it on every site): the web UI's icon
    (``repliscope/service/web/static/favicon.ico``, also linked by its pages)."""
    from importlib.resources import files

    from fastapi.responses import Response

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        data = files("repliscope.service.web").joinpath("static", "favicon.ico").read_bytes()
        return Response(data, media_type="image/x-icon", headers={"Cache-Control": FAVICON_CACHE})


def _mount_web(app: FastAPI) -> None:
    """Include the web UI's router (``repliscope.service.web``) when it is there."""
    try:
        from repliscope.service.web import LoginRequired, login_redirect
        from repliscope.service.web import router as web_router
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("repliscope.service.web"):
            raise
        return
    app.include_router(web_router)
    from repliscope.service.web.diff_pages import router as diff_pages

    app.include_router(diff_pages)
    from repliscope.service.web.annotations import router as annotation_pages  # tags, notes, rename, /audit

    app.include_router(annotation_pages)
    from repliscope.service.web.compare_perf import router as compare_perf  # /compare/benchmarks

    app.include_router(compare_perf)
    from repliscope.service.web.charts import router as charts  # /charts, /sweeps/{id}/parallel

    app.include_router(charts)
    from repliscope.service.web.artifacts import router as artifacts
    from repliscope.service.web.job_pages import router as job_pages

    app.include_router(job_pages)
    app.include_router(artifacts)
    app.add_exception_handler(LoginRequired, login_redirect)

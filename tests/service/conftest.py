"""Shared fixtures of the service tests (S3/S4 may use them; names and meanings are stable):

- ``service_app``: a FastAPI app (``create_app``) on a fresh tmp SQLite store with the default ``DaskJobExecutor``
  (its in-process LocalCluster starts on first use and is closed at teardown); ``repliscope serve``'s first start
  has run on it (admin token created, ``foolbox_imagenet`` registered). The session's shared model cache
  (``$REPLISCOPE_CACHE``) is used.
- ``tokens``: ``{"viewer": ..., "runner": ..., "admin": ...}`` plaintext tokens of each role on that store.
- ``client``: an ``httpx``-based ``TestClient`` of ``service_app`` (no token set).
- ``headers(role)``: ``{"Authorization": "Bearer <token of role>"}`` (``headers_for`` fixture).

Everything is skipped with the reason when the ``service`` extra is not installed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("httpx", reason="the 'service' extra is not installed")

from fastapi.testclient import TestClient

ROLES = ("viewer", "runner", "admin")


@pytest.fixture
def service_db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'service.db'}"


@pytest.fixture
def service_app(service_db_url: str) -> Iterator[Any]:
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start

    app = create_app(ServiceConfig(db_url=service_db_url))
    admin, _ = first_start(app.state.store)
    app.state.test_admin_token = admin
    yield app
    app.state.executor.shutdown(wait=True)
    app.state.cluster.close()


@pytest.fixture
def tokens(service_app: Any) -> dict[str, str]:
    from repliscope.store.accounts import create_token

    store = service_app.state.store
    return {
        "viewer": create_token(store, "test-viewer", "viewer"),
        "runner": create_token(store, "test-runner", "runner"),
        "admin": service_app.state.test_admin_token,
    }


@pytest.fixture
def client(service_app: Any) -> Iterator[TestClient]:
    with TestClient(service_app) as c:
        yield c


@pytest.fixture
def headers_for(tokens: dict[str, str]) -> Callable[[str], dict[str, str]]:
    def headers(role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {tokens[role]}"}

    return headers


@contextmanager
def app_with_role_tokens(folder: Path, viewer: str = "test-viewer", runner: str = "test-runner") -> Iterator[Any]:
    """A service app on a fresh SQLite store in ``folder`` after the first start, with ``app.state.test_tokens``
    ``{"viewer", "runner", "admin"}`` (users ``viewer`` and ``runner``; for a module-scoped fixture: one app for a
    module's tests)."""
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.accounts import create_token

    application = create_app(ServiceConfig(db_url=f"sqlite:///{folder / 'service.db'}"))
    admin, _ = first_start(application.state.store)
    store = application.state.store
    application.state.test_tokens = {
        "viewer": create_token(store, viewer, "viewer"),
        "runner": create_token(store, runner, "runner"),
        "admin": admin,
    }
    try:
        yield application
    finally:
        application.state.executor.shutdown(wait=True)
        application.state.cluster.close()


def reset_runs(app: Any, *records: Any) -> None:
    """Empty ``app``'s runs, samples, tags, labels and audit and its pages' chart cache, then store ``records``: a
    module-scoped app's state for each test."""
    from sqlalchemy import text

    from repliscope.service.web.chart_cache import CHARTS

    store = app.state.store
    with store.engine.begin() as conn:
        for table in ("run_audit", "run_tags", "run_labels", "sample_predictions", "runs"):
            conn.execute(text(f"DELETE FROM {table}"))
    CHARTS.clear()
    for record in records:
        store.save(record)


CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')


class WebClient(TestClient):
    """A TestClient that posts like the web UI's own forms: its ``Origin`` is the server's, and a form without a
    ``csrf_token`` gets the one a page of the site holds (the login page's before login, else an error page's:
    every signed-in page carries it in its log-out form)."""

    def __init__(self, app: Any, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.headers["Origin"] = str(self.base_url).rstrip("/")

    def page_csrf(self, url: str) -> str:
        page = self.get("/login" if url == "/login" else "/runs/no-such-run-for-its-csrf-token")
        found = CSRF_INPUT.search(page.text)
        assert found is not None, f"no csrf_token in the page: {page.status_code} {page.text[:300]}"
        return found.group(1)

    def post(self, url: Any, *args: Any, **kwargs: Any) -> Any:
        data = kwargs.get("data")
        if str(url) in ("/login", "/logout", "/new") and (data is None or "csrf_token" not in data):
            kwargs["data"] = {**(data or {}), "csrf_token": self.page_csrf(str(url))}
        return super().post(url, *args, **kwargs)

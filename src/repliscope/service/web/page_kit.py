"""What every web page route shares: the Jinja environment and :func:`render`, the signed-in caller
(:data:`SignedIn`, :class:`LoginRequired`), the page and error responses, the CSRF check of a form, the store, the
view of a value for a caller below admin, and the checks of page numbers, dates and roles. Page modules
(:mod:`~repliscope.service.web.routes` and the modules beside it) import from here, never from each other's
routes."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import cache
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from repliscope.service import csrf
from repliscope.service.auth import ROLES
from repliscope.service.web import run_columns

DATE_FILTERS = ("created_from", "created_to")
"""The runs page's date range (UTC days, both inclusive)."""
MAX_SEARCH_CHARS = 200
"""The longest search text a list page takes."""


@cache
def environment() -> Any:
    from jinja2 import Environment, PackageLoader, StrictUndefined

    from repliscope.service.web.metric_format import FILTERS

    env = Environment(
        loader=PackageLoader("repliscope.service.web", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(FILTERS)  # one number format per metric (metric_value, metric_interval, metric_delta)
    env.globals["default_columns"] = run_columns.choose(None)  # the runs table's columns without a choice
    return env


def render(template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    html = environment().get_template(template).render(**context)
    return HTMLResponse(html, status_code=status_code)


def principal_or_none(request: Request) -> Any | None:
    """The caller (cookie or Bearer token), or None; a malformed Authorization header counts as none."""
    from repliscope.service.auth import principal_of
    from repliscope.service.errors import ApiError

    try:
        return principal_of(request)
    except ApiError:
        return None


def safe_next(target: str | None) -> str:
    """Only a local path is a redirect target (never ``//host`` or a URL: no open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


class LoginRequired(Exception):
    """A page needs a signed-in caller: :func:`login_redirect` answers it with a redirect to ``/login?next=``."""

    def __init__(self, here: str) -> None:
        super().__init__(here)
        self.here = here


def signed_in(request: Request) -> Any:
    """The caller of a page (a dependency: :data:`SignedIn`); no caller -> :class:`LoginRequired`."""
    principal = principal_or_none(request)
    if principal is None:
        raise LoginRequired(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
    return principal


SignedIn = Annotated[Any, Depends(signed_in)]
"""A page route's signed-in caller (a principal); a request without one is redirected to the login page."""


async def login_redirect(_request: Request, exc: Exception) -> Response:
    """The app's handler of :class:`LoginRequired` (registered with the web router)."""
    here = exc.here if isinstance(exc, LoginRequired) else "/"
    return RedirectResponse(f"/login?next={quote(here, safe='')}", status_code=303)


def page(principal: Any, template: str, status_code: int = 200, **context: Any) -> Response:
    return render(
        template, status_code=status_code, principal=principal, csrf_token=csrf.token_for(principal), **context
    )


def form_csrf_ok(form: Any, principal: Any) -> bool:
    """The form's ``csrf_token`` is the signed-in caller's (see :mod:`repliscope.service.csrf`)."""
    return csrf.valid(str(form.get(csrf.FIELD) or ""), csrf.token_for(principal))


CSRF_REFUSED = (
    "This form is out of date or did not come from this site (CSRF token missing or wrong): reload the "
    "page and submit again."
)


def error_page(principal: Any, status_code: int, message: str) -> Response:
    from repliscope.service.errors import redact

    return page(principal, "error.html", status_code=status_code, title="Error", message=redact(message))


def store_of(request: Request) -> Any:
    return request.app.state.store


def for_viewer(request: Request, principal: Any, value: Any) -> Any:
    """``value`` (a page's rows, a job, a stored diff) as ``principal`` may see it: an admin as stored, anyone
    else without absolute server paths (:func:`repliscope.service.redaction.hide_paths_in`)."""
    from repliscope.service.redaction import hide_paths_in, request_roots

    return hide_paths_in(value, request_roots(request, principal))


_WHOLE_NUMBER = re.compile(r"[0-9]{1,7}")


def page_number_problem(value: str, field: str) -> str | None:
    """Why ``value`` is not a page number (ASCII digits, 1 to :data:`~repliscope.service.routers.common.MAX_PAGE`),
    or None when it is one."""
    from repliscope.service.routers.common import MAX_PAGE

    if _WHOLE_NUMBER.fullmatch(value) and 1 <= int(value) <= MAX_PAGE:
        return None
    return f"{field} must be a whole number from 1 to {MAX_PAGE:,}, not '{value[:40]}'"


def parse_date(value: str, field: str, problems: list[str]) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        problems.append(f"{field} must be a date YYYY-MM-DD, not '{value}'")
        return None


def role_at_least(principal: Any, role: str) -> bool:
    return ROLES.index(principal.role) >= ROLES.index(role)


def sweep_reference(store: Any, sweep_id: str) -> str | None:
    """A pitfall sweep's id (a job's result) -> its reference run's id (whose page shows the sweep); None when
    no sweep is stored under it."""
    from repliscope.errors import StoreError

    try:
        return str(store.get_sweep(sweep_id).reference.run_id)
    except StoreError:
        return None

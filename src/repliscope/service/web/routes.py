"""The web UI's pages (server-rendered Jinja2, no JavaScript needed except the job page's polling).

Every page but ``/login`` needs a token: the HttpOnly cookie ``repliscope_token`` set by the login form (or a
Bearer header), checked by :func:`repliscope.service.auth.principal_of`; without one the page redirects to
``/login?next=...``. The store is ``request.app.state.store`` (the app's :class:`RunStore`).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from functools import partial
from importlib.resources import files
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from repliscope.errors import RepliscopeError, StoreError
from repliscope.service import csrf
from repliscope.service.auth import COOKIE
from repliscope.service.errors import ApiError
from repliscope.service.web import page_kit as kit
from repliscope.service.web import run_columns, views
from repliscope.service.web.page_kit import (
    CSRF_REFUSED,
    DATE_FILTERS,
    MAX_SEARCH_CHARS,
    SignedIn,
    for_viewer,
    page_number_problem,
    render,
)
from repliscope.service.web.samples import DRAW_MIN_SCORE

router = APIRouter(include_in_schema=False)

STATIC = {
    "style.css": "text/css; charset=utf-8",
    "job.js": "text/javascript; charset=utf-8",
    "samples.js": "text/javascript; charset=utf-8",
    "runs.js": "text/javascript; charset=utf-8",
    "wizard.js": "text/javascript; charset=utf-8",
}
PAGE_SIZES = (25, 50, 100)
COOKIE_MAX_AGE = 8 * 3600
MAX_POSITION = 2**31 - 1
"""The largest sample position a thumbnail URL takes (a 422 past it)."""


# --- static assets ------------------------------------------------------------------------------------------


@router.get("/static/{name}")
def static(name: str) -> Response:
    if name not in STATIC:
        return Response("not found", status_code=404, media_type="text/plain")
    data = files("repliscope.service.web").joinpath("static", name).read_bytes()
    return Response(data, media_type=STATIC[name], headers={"Cache-Control": "max-age=3600"})


# --- login --------------------------------------------------------------------------------------------------


def _login_page(request: Request, target: str, status_code: int = 200, message: str | None = None) -> Response:
    """The login form, bound to the browser's ``repliscope_csrf`` cookie (set now when it has none)."""
    nonce = request.cookies.get(csrf.NONCE_COOKIE) or csrf.new_nonce()
    response = render(
        "login.html",
        status_code=status_code,
        principal=None,
        title="Log in",
        next=target,
        message=message,
        csrf_token=csrf.login_token(nonce),
    )
    if request.cookies.get(csrf.NONCE_COOKIE) != nonce:
        response.set_cookie(
            csrf.NONCE_COOKIE, nonce, httponly=True, samesite="strict", secure=request.url.scheme == "https", path="/"
        )
    return response


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/") -> Response:
    return _login_page(request, kit.safe_next(next))


@router.post("/login")
async def login(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool

    from repliscope.store.accounts import authenticate

    form = await request.form(max_files=0, max_fields=10)
    token = str(form.get("token") or "").strip()
    target = kit.safe_next(str(form.get("next") or "/"))
    nonce = request.cookies.get(csrf.NONCE_COOKIE) or ""
    if not nonce or not csrf.valid(str(form.get(csrf.FIELD) or ""), csrf.login_token(nonce)):
        return _login_page(request, target, 403, CSRF_REFUSED)
    if not token:
        return _login_page(
            request, target, 400, "Enter a token (create one with `repliscope token create --role viewer`)."
        )
    principal = await run_in_threadpool(authenticate, kit.store_of(request), token)
    if principal is None:
        return _login_page(request, target, 401, "Unknown or revoked token.")
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE,
        token,
        max_age=COOKIE_MAX_AGE,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@router.post("/logout")
async def logout(request: Request, principal: SignedIn) -> Response:
    form = await request.form(max_files=0, max_fields=10)
    if not kit.form_csrf_ok(form, principal):
        return kit.error_page(principal, 403, CSRF_REFUSED)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


# --- models -------------------------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
def models_page(request: Request, principal: SignedIn) -> Response:
    """Every model with its best-supported verdict per runtime and dataset
    (:func:`repliscope.service.model_verdicts.best_verdicts`)."""
    from repliscope.service.model_verdicts import best_verdicts

    models = best_verdicts(kit.store_of(request))
    names = views.best_cell_names(kit.store_of(request), models)  # the runs' display names
    return kit.page(principal, "models.html", title="Models", models=models, run_names=names)


@router.get("/models/{name}", response_class=HTMLResponse)
def model_page(request: Request, name: str, principal: SignedIn) -> Response:
    from repliscope.service.model_verdicts import best_verdicts

    rows = best_verdicts(kit.store_of(request), name)
    if not rows:
        return kit.error_page(principal, 404, f"no evaluation of a model named '{name}' is stored")
    from repliscope.service.web.agents import matrix_links
    from repliscope.store.repository import RunQuery

    runs, total = views.run_lines(kit.store_of(request), RunQuery(model=name), "-created_at", 1, 50)
    matrices = matrix_links(kit.store_of(request).list_stack_matrices(limit=50, manifest_name=name))
    names = views.best_cell_names(kit.store_of(request), rows)  # the runs' display names
    return kit.page(
        principal, "model.html", title=name, model=rows[0], runs=runs, total=total, matrices=matrices, run_names=names
    )


# --- runs ---------------------------------------------------------------------------------------------------


SORTABLE_COLUMNS = {
    "created_at": "-",
    "kind": "",
    "model": "",
    "variant": "",
    "runtime": "",
    "hardware": "",
    "dataset": "",
    "samples": "-",
    "metric": "-",
    "verdict": "",
}
"""The runs table's sortable columns -> the direction of a first click (``-``: descending, newest / largest
first); a second click on the sorted column reverses it."""


def _sort_links(base: dict[str, str], sort: str) -> dict[str, dict[str, str]]:
    """Per sortable column: the href of a click on its header (page 1, the filters kept) and its ``aria-sort``."""
    out = {}
    for key, first in SORTABLE_COLUMNS.items():
        if sort == key:
            target, state = f"-{key}", "ascending"
        elif sort == f"-{key}":
            target, state = key, "descending"
        else:
            target, state = f"{first}{key}", "none"
        query = "&".join(f"{k}={quote(v, safe='')}" for k, v in {**base, "sort": target}.items())
        out[key] = {"href": f"/runs?{query}", "state": state}
    return out


def _deleted_notice(store: Any, value: str, principal: Any) -> str | None:
    from repliscope.service.web.annotations import deleted_notice  # /runs?deleted=ID after a delete (admin)

    return deleted_notice(store, value, principal)


def _export_query(filters: dict[str, str], sort: str) -> str:
    """The API query (``/api/v1/runs/export``) of the page's filters: its UTC days as the API's datetimes."""
    api = {k: v for k, v in filters.items() if k not in DATE_FILTERS}
    if "created_from" in filters:
        api["created_from"] = f"{filters['created_from']}T00:00:00Z"
    if "created_to" in filters:
        day = datetime.strptime(filters["created_to"], "%Y-%m-%d").date()
        if day < date.max:
            api["created_to"] = f"{day + timedelta(days=1)}T00:00:00Z"
    return "&".join(f"{k}={quote(v, safe='')}" for k, v in {**api, "sort": sort}.items())


@router.get("/runs", response_class=HTMLResponse)
def runs_page(
    request: Request, principal: SignedIn, sort: str = "-created_at", page: str = "1", page_size: str = "50"
) -> Response:
    from repliscope.store.repository import SORTS, RunQuery
    from repliscope.store.service_tables import InvalidInputError

    params = request.query_params
    filters = {k: v for k in ("search", *views.RUN_FILTERS, *DATE_FILTERS) if (v := params.get(k, "").strip())}
    problems: list[str] = []
    if sort not in SORTS:
        problems.append(f"sort must be one of {', '.join(SORTS)}, not '{sort}'")
    if (problem := page_number_problem(page, "page")) is not None:
        problems.append(problem)
    if page_size not in {str(n) for n in PAGE_SIZES}:
        problems.append(f"page_size must be one of {', '.join(map(str, PAGE_SIZES))}, not '{page_size}'")
    if len(filters.get("search", "")) > MAX_SEARCH_CHARS:
        problems.append(f"search must be at most {MAX_SEARCH_CHARS} characters")
    created_from = kit.parse_date(filters.get("created_from", ""), "created_from", problems)
    created_to = kit.parse_date(filters.get("created_to", ""), "created_to", problems)
    try:
        columns = run_columns.choose(params.getlist("cols") if "cols" in params else None)
    except ValueError as exc:
        problems.append(str(exc))
    if problems:
        return kit.error_page(principal, 422, "; ".join(problems))
    if created_to is not None and created_to.date() == date.max:
        created_to_end = None  # through the last day there is: no upper bound (the day after does not exist)
    else:
        created_to_end = created_to + timedelta(days=1) if created_to else None
    if "sweep_id" in filters:  # the 12-character id the pages show is enough
        from repliscope.service.routers.runs import _full_sweep_id

        try:
            filters["sweep_id"] = _full_sweep_id(kit.store_of(request), filters["sweep_id"])
        except ApiError as exc:
            return kit.error_page(principal, 400, exc.message)
    query = RunQuery(
        **{k: v for k, v in filters.items() if k in views.RUN_FILTERS},
        search=filters.get("search"),
        created_from=created_from,
        created_to=created_to_end,
    )
    number, size = int(page), int(page_size)
    store = kit.store_of(request)
    try:
        lines, total = views.run_lines(store, query, sort, number, size)
    except InvalidInputError as exc:
        return kit.error_page(principal, 422, f"{exc.field}: {exc}" if exc.field else str(exc))
    pages = max(1, -(-total // size))
    base = {**filters, "sort": sort, "page_size": str(size), **({"cols": columns.param} if columns.given else {})}
    link = "&".join(f"{k}={quote(v, safe='')}" for k, v in base.items())
    return kit.page(
        principal,
        "runs.html",
        title="Runs",
        runs=lines,
        notice=_deleted_notice(store, params.get("deleted", ""), principal),
        total=total,
        filters=filters,
        choices=views.filter_choices(store),
        sort=sort,
        sorts=SORTS,
        sort_links=_sort_links({k: v for k, v in base.items() if k != "sort"}, sort),
        selectable=True,
        columns=columns,
        export=_export_query(filters, sort),
        page=number,
        pages=pages,
        page_size=size,
        page_sizes=PAGE_SIZES,
        query=link,
    )


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: str, principal: SignedIn, show: str = "", samples_page: str = "1") -> Response:
    """A run (or a benchmark, or a sweep id: its reference run); ``show`` / ``samples_page`` page its samples
    (:mod:`repliscope.service.web.samples`)."""
    from repliscope.service.web import samples
    from repliscope.service.web.annotations import annotation_panel

    store = kit.store_of(request)
    if (problem := page_number_problem(samples_page, "samples_page")) is not None:
        return kit.error_page(principal, 422, problem)
    try:
        page = views.run_page(store, run_id)
        annotations = annotation_panel(store, page.record.run_id)  # a run deleted since it was cached: 404
    except StoreError as run_error:
        try:
            bench = views.bench_page(store, run_id)
        except StoreError:
            reference = kit.sweep_reference(store, run_id)
            if reference is None:
                return kit.error_page(principal, 404, str(run_error))
            return RedirectResponse(f"/runs/{quote(reference, safe='')}", status_code=303)
        view = _viewer_view(request, principal, bench.view)
        return kit.page(principal, "bench.html", title=bench.view.title, page=bench, view=view)
    shows = samples.shows_of(page.record.task)
    if show and show not in shows:
        return kit.error_page(principal, 422, f"show must be one of {', '.join(shows)}, not '{show[:40]}'")
    panel = samples.samples_panel(
        page.record, show or shows[0], int(samples_page), samples.images_of(store, page.record)
    )
    if principal.role != "admin":
        import dataclasses

        from repliscope.service.web.redact import hide_paths, named_roots

        roots = named_roots(request.app.state.config.cache_dir)
        panel = dataclasses.replace(
            panel,
            lines=[
                dataclasses.replace(x, error=hide_paths(x.error, roots) if x.error else x.error) for x in panel.lines
            ],
        )
    return kit.page(
        principal,
        "run.html",
        title=page.view.title,
        page=page,
        view=_viewer_view(request, principal, page.view),
        samples=panel,
        annotations=annotations,
    )


@router.get("/benchmarks", response_class=HTMLResponse)
def benchmarks_page(
    request: Request, principal: SignedIn, manifest: str = "", page: str = "1", page_size: str = "50"
) -> Response:
    """The stored benchmarks, newest first, page by page; ``manifest`` keeps one manifest's."""
    from repliscope.service.routers.benchmarks import benchmark_page

    problems: list[str] = []
    if (problem := page_number_problem(page, "page")) is not None:
        problems.append(problem)
    if page_size not in {str(n) for n in PAGE_SIZES}:
        problems.append(f"page_size must be one of {', '.join(map(str, PAGE_SIZES))}, not '{page_size[:40]}'")
    manifest = manifest.strip()
    if len(manifest) > 300:
        problems.append("manifest: a manifest name has at most 300 characters")
    if problems:
        return kit.error_page(principal, 422, "; ".join(problems))
    store = kit.store_of(request)
    number, size = int(page), int(page_size)
    try:
        result = benchmark_page(store, manifest or None, number, size)
    except ApiError as exc:
        return kit.error_page(principal, exc.status, exc.message)
    base = {"manifest": manifest, "page_size": str(size)} if manifest else {"page_size": str(size)}
    return kit.page(
        principal,
        "benchmarks.html",
        title="Benchmarks",
        benchmarks=for_viewer(request, principal, result.items),
        total=result.total,
        manifest=manifest,
        manifests=store.benchmarks.manifest_names(),
        page=number,
        pages=max(1, -(-result.total // size)),
        page_size=size,
        page_sizes=PAGE_SIZES,
        query="&".join(f"{k}={quote(v, safe='')}" for k, v in base.items()),
    )


@router.get("/benchmarks/{benchmark_id}", response_class=HTMLResponse)
def benchmark_detail_page(request: Request, benchmark_id: str, principal: SignedIn) -> Response:
    """One benchmark: its scenario and settings, latency percentiles and ECDF, throughput, performance-claim
    verdicts and provenance."""
    try:
        bench = views.bench_page(kit.store_of(request), benchmark_id)
    except StoreError as exc:
        return kit.error_page(principal, 404, str(exc))
    view = _viewer_view(request, principal, bench.view)
    return kit.page(principal, "bench.html", title=bench.view.title, page=bench, view=view)


@router.get("/runs/{run_id}/samples/{position}/thumbnail.png")
def sample_thumbnail(
    request: Request,
    run_id: str,
    position: Annotated[int, Path(ge=0, le=MAX_POSITION)],
    principal: SignedIn,
    size: Literal["thumb", "large"] = "thumb",
    min_score: Annotated[float, Query(ge=0, le=1)] = DRAW_MIN_SCORE,
) -> Response:
    """A sample's thumbnail, or its larger view (``size=large``: boxes labelled with class and score); detection:
    its boxes, detections from ``min_score``; 404 when the run's dataset does not re-load here."""
    from repliscope.service.web import samples

    try:
        png = samples.sample_thumbnail(kit.store_of(request), run_id, position, size, min_score)
    except StoreError as exc:
        from repliscope.service.errors import redact

        return Response(redact(str(exc)), status_code=404, media_type="text/plain")
    if png is None:
        return Response("no thumbnail for this sample", status_code=404, media_type="text/plain")
    return Response(png, media_type="image/png", headers={"Cache-Control": "private, max-age=86400"})


def _viewer_view(request: Request, principal: Any, view: Any) -> Any:
    """``view`` as ``principal`` may see it: an admin sees server paths as stored, anyone else relative to named
    roots (:mod:`repliscope.service.web.redact`)."""
    if principal.role == "admin":
        return view
    from repliscope.service.web.redact import named_roots, redact_view

    return redact_view(view, named_roots(request.app.state.config.cache_dir))


def _hide_paths(text: str, roots: Any) -> str:
    from repliscope.service.web.redact import hide_paths

    return hide_paths(text, roots)


@router.get("/compare", response_class=HTMLResponse)
def compare_page(request: Request, principal: SignedIn, a: str = "", b: str = "", sweep: str = "") -> Response:
    """Two or more runs: ``?run=A&run=B&run=C...`` (the runs page's checkboxes) or ``?a=A&b=B``. Every count
    gets the metrics table and chart across the runs; exactly two also get the paired details (deltas, McNemar,
    flips or differing images). ``?sweep=ID&page=N``: a pitfall sweep's runs of any number, the reference and
    up to eleven variants a page (:func:`~repliscope.service.web.compare_many.sweep_page`)."""
    from repliscope.service.web.compare_cache import HEADS
    from repliscope.service.web.compare_many import MAX_RUNS, boxes_panel, many_page, mixed_tasks, sweep_page

    unknown = sorted(set(request.query_params) - {"a", "b", "run", "sweep", "page"})
    if unknown:
        return kit.error_page(
            principal, 400, f"unknown query parameter {unknown[0]!r} (allowed: run, a, b, sweep, page)"
        )
    asked = [v.strip() for v in (a, b, *request.query_params.getlist("run")) if v.strip()]
    sweep_pager = None
    if "page" in request.query_params and not sweep.strip():
        return kit.error_page(principal, 400, "page pages a sweep's compare: give it with sweep=SWEEP_ID")
    if sweep.strip():
        if asked:
            return kit.error_page(
                principal, 400, "compare takes either sweep (and page) or run ids (run, a, b), not both"
            )
        sweep_page_number = request.query_params.get("page", "1")
        if (problem := page_number_problem(sweep_page_number, "page")) is not None:
            return kit.error_page(principal, 422, problem)
        from repliscope.service.routers.runs import _full_sweep_id

        try:
            sweep_id = _full_sweep_id(kit.store_of(request), sweep.strip()[:100])
            sweep_pager = sweep_page(
                sweep_id, views.variant_runs(kit.store_of(request), sweep_id), int(sweep_page_number)
            )
        except ApiError as exc:
            return kit.error_page(principal, 422, exc.message)
        except ValueError as exc:
            return kit.error_page(principal, 404 if "stored run" in str(exc) else 422, str(exc))
        asked = sweep_pager.run_ids
    if len(asked) < 2:
        return kit.error_page(
            principal,
            400,
            f"compare needs at least two run ids, got {len(asked)} (/compare?run=RUN_A&run=RUN_B&run=..., "
            "or tick runs on the runs page)",
        )
    if len(asked) > MAX_RUNS:
        return kit.error_page(principal, 422, f"compare takes at most {MAX_RUNS} runs, got {len(asked)}")
    if long_ids := [v for v in asked if len(v) > 100]:
        return kit.error_page(
            principal, 422, f"a run id is at most 100 characters, got {len(long_ids[0])} (run, a or b)"
        )
    store = kit.store_of(request)
    records: list[Any] = []
    try:
        for run_id in asked:  # without their samples: what the figures need is read once, when not cached
            record = HEADS.get(store, run_id)
            if all(r.run_id != record.run_id for r in records):
                records.append(record)
        store.annotations.ensure_stored([r.run_id for r in records])  # not one deleted since it was cached
    except StoreError as exc:
        return kit.error_page(principal, 404, str(exc))
    if len(records) < 2:
        return kit.error_page(
            principal, 400, f"compare needs two different runs; every id given is run {records[0].run_id}"
        )
    if (refusal := mixed_tasks(records)) is not None:  # runs of different tasks: refused with the reason
        return kit.page(principal, "compare_refused.html", 422, title="Compare refused", refusal=refusal)
    roots: Any = None
    if principal.role != "admin":
        from repliscope.service.web.redact import named_roots

        roots = named_roots(request.app.state.config.cache_dir)
    many = many_page(
        records, None if roots is None else partial(_hide_paths, roots=roots), full=lambda r: store.get(r.run_id)
    )
    page = None
    if len(records) == 2:
        page = views.compare_page(store, records[0].run_id, records[1].run_id)
        if roots is not None:
            from repliscope.service.web.redact import redact_compare

            page = redact_compare(page, roots)
    return kit.page(
        principal,
        "compare.html",
        title=f"Compare sweep {sweep_pager.sweep_id[:12]}" if sweep_pager else "Compare",
        sweep_pager=sweep_pager,
        many=many,
        run_names=store.annotations.labels(r.run_id for r in records),  # display names (runs rename)
        page=page,
        c=page.comparison if page is not None else None,
        boxes=boxes_panel(store, page.a.run_id, page.b.run_id, page.differing_images)
        if page and page.detection
        else None,
    )


# --- wizard and jobs ----------------------------------------------------------------------------------------


@router.get("/new", response_class=HTMLResponse)
def wizard_page(request: Request, principal: SignedIn, manifest: str = "", uploaded: str = "") -> Response:
    """The wizard; ``?manifest=NAME@VERSION`` chooses the model whose fitting runtimes, datasets and variants are
    offered (the page's script re-filters when another is picked); ``uploaded=created|stored``: the upload form's
    success, said when that manifest is stored."""
    from repliscope.service.web import wizard

    choices = wizard.wizard_choices(kit.store_of(request), _agent_choices(request), manifest[:300] or None)
    stored = choices["chosen"] is not None and choices["chosen"].ref == manifest
    return kit.page(
        principal,
        "new.html",
        title="New run",
        choices=choices,
        can_run=kit.role_at_least(principal, "runner"),
        message=None,
        field=None,
        values={"manifest": manifest[:300]} if manifest else {},
        upload=wizard.UploadResult(manifest, uploaded == "created") if stored and uploaded in wizard.UPLOADED else None,
        upload_limit=wizard.upload_limit(request),
    )


@router.post("/new/manifest")
async def wizard_upload(request: Request, principal: SignedIn) -> Response:
    """The wizard's upload form (multipart ``file`` or ``text``, CSRF token, role runner): the manifest is validated
    and stored as ``POST /api/v1/manifests`` does (:func:`repliscope.service.web.wizard.upload_manifest`), then the
    wizard opens with it chosen; a refusal shows the wizard with the messages at the upload's field."""
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException

    from repliscope.service.web import wizard
    from repliscope.service.web.job_pages import WizardError

    limit = wizard.upload_limit(request)

    async def refused(status: int, field: str, message: str) -> Response:
        choices = await run_in_threadpool(wizard.wizard_choices, kit.store_of(request), _agent_choices(request), None)
        return kit.page(
            principal,
            "new.html",
            status_code=status,
            title="New run",
            choices=choices,
            can_run=kit.role_at_least(principal, "runner"),
            message=None,
            field=None,
            values={},
            upload=wizard.UploadRefusal(field, message),
            upload_limit=limit,
        )

    try:
        raw = await request.form(
            max_files=1,
            max_fields=len(wizard.UPLOAD_FIELDS) + 1,
            max_part_size=request.app.state.config.max_upload_bytes,
        )
    except HTTPException as exc:  # too many parts, a malformed body
        return await refused(exc.status_code, "file", f"the upload form could not be read: {exc.detail}")
    if not kit.form_csrf_ok(raw, principal):
        return kit.error_page(principal, 403, CSRF_REFUSED)
    if not kit.role_at_least(principal, "runner"):
        message = f"uploading a manifest needs the role 'runner'; the token '{principal.name}' has '{principal.role}'"
        return await refused(403, "file", message)
    try:
        ref, created, _warnings = await wizard.upload_manifest(request, principal, raw)
    except WizardError as exc:
        return await refused(exc.status, exc.field, exc.message)
    target = f"/new?manifest={quote(ref, safe='')}&uploaded={'created' if created else 'stored'}"
    return RedirectResponse(target, status_code=303)


def _agent_choices(request: Request) -> list[Any]:
    """The live agents for the wizard ([] when the cluster cannot be reached: the job then names the reason)."""
    from repliscope.service.routers.agents import list_agents
    from repliscope.service.web import job_pages as jobs

    try:
        return jobs.agent_choices(list_agents(request))
    except (ApiError, RepliscopeError, OSError):
        return []


@router.post("/new")
async def wizard_submit(request: Request, principal: SignedIn) -> Response:
    from starlette.concurrency import run_in_threadpool

    from repliscope.service.web import wizard
    from repliscope.service.web.job_pages import WizardError

    raw = await request.form(max_files=0, max_fields=200)
    if not kit.form_csrf_ok(raw, principal):
        return kit.error_page(principal, 403, CSRF_REFUSED)
    form: dict[str, Any] = {k: str(v) for k, v in raw.items() if k not in (csrf.FIELD, "variants")}
    form["variants"] = [str(v) for v in raw.getlist("variants")][:100]
    # the store, the cluster and the placement block: off the event loop
    choices = await run_in_threadpool(
        lambda: wizard.wizard_choices(kit.store_of(request), _agent_choices(request), form.get("manifest") or None)
    )
    if not kit.role_at_least(principal, "runner"):
        return kit.page(
            principal,
            "new.html",
            status_code=403,
            title="New run",
            choices=choices,
            can_run=False,
            message=f"submitting a job needs the role 'runner'; the token '{principal.name}' has '{principal.role}'",
            field=None,
            values=form,
        )
    try:
        job_id = await run_in_threadpool(wizard.submit, request, principal, form, choices)
    except WizardError as exc:
        return kit.page(
            principal,
            "new.html",
            status_code=exc.status,
            title="New run",
            choices=choices,
            can_run=True,
            message=f"{exc.field}: {exc.message}",
            field=exc.field,
            values=form,
        )
    return RedirectResponse(f"/jobs/{quote(job_id, safe='')}", status_code=303)


# --- datasets -----------------------------------------------------------------------------------------------


def _datasets_page(
    request: Request, principal: Any, status_code: int = 200, message: str | None = None, values: Any = None
) -> Response:
    from repliscope.service.web.datasets import dataset_lines

    hide = None
    if principal.role != "admin":  # a folder on the server is a path: admins only
        from repliscope.service.web.redact import hide_paths, named_roots

        roots = named_roots(request.app.state.config.cache_dir)

        def hide(text: str) -> str:
            return hide_paths(text, roots)

    return kit.page(
        principal,
        "datasets.html",
        status_code=status_code,
        title="Datasets",
        datasets=dataset_lines(kit.store_of(request), hide),
        is_admin=principal.role == "admin",
        message=message,
        values=values or {},
    )


@router.get("/datasets", response_class=HTMLResponse)
def datasets_page(request: Request, principal: SignedIn) -> Response:
    """The registered datasets, their declarations (who, when), annotations and runs."""
    return _datasets_page(request, principal)


async def _datasets_form(request: Request, principal: Any) -> tuple[dict[str, str] | None, Response | None]:
    """The posted datasets form (admin, CSRF-checked), or the page refusing it."""
    raw = await request.form(max_files=0, max_fields=10)
    if not kit.form_csrf_ok(raw, principal):
        return None, kit.error_page(principal, 403, CSRF_REFUSED)
    form = {k: str(v) for k, v in raw.items() if k != csrf.FIELD}
    if principal.role != "admin":
        message = f"registering or declaring a dataset needs the role 'admin'; '{principal.name}' is {principal.role}"
        return None, kit.error_page(principal, 403, message)
    return form, None


@router.post("/datasets")
async def datasets_register(request: Request, principal: SignedIn) -> Response:
    from starlette.concurrency import run_in_threadpool

    from repliscope.service.web.datasets import FormError, register_from_form

    form, refused = await _datasets_form(request, principal)
    if form is None:
        return refused or kit.error_page(principal, 400, "no form")
    try:
        await run_in_threadpool(register_from_form, kit.store_of(request), principal, form)
    except FormError as exc:
        return await run_in_threadpool(
            _datasets_page, request, principal, exc.status, f"{exc.field}: {exc.message}", form
        )
    return RedirectResponse("/datasets", status_code=303)


@router.post("/datasets/declaration")
async def datasets_declare(request: Request, principal: SignedIn) -> Response:
    from starlette.concurrency import run_in_threadpool

    from repliscope.service.web.datasets import FormError, declare_from_form

    form, refused = await _datasets_form(request, principal)
    if form is None:
        return refused or kit.error_page(principal, 400, "no form")
    try:
        await run_in_threadpool(declare_from_form, kit.store_of(request), principal, form.get("dataset", ""), form)
    except FormError as exc:
        return await run_in_threadpool(_datasets_page, request, principal, exc.status, f"{exc.field}: {exc.message}")
    return RedirectResponse("/datasets", status_code=303)


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(request: Request, principal: SignedIn, status: str = "", kind: str = "", user: str = "") -> Response:
    """Every job, newest first, filtered by status, kind and submitter; a runner can cancel unfinished ones."""
    from repliscope.service.web import job_pages as jobs

    unknown = sorted(set(request.query_params) - {"status", "kind", "user"})
    if unknown:
        return kit.error_page(principal, 422, f"unknown query parameter {unknown[0]!r} (allowed: kind, status, user)")
    filters = jobs.JobsFilter(status=status, kind=kind, user=user)
    problem = filters.problem()
    if problem is not None:
        return kit.error_page(principal, 422, problem)
    store = kit.store_of(request)
    from repliscope.store.service_tables import JOB_STATUSES

    return kit.page(
        principal,
        "jobs.html",
        title="Jobs",
        jobs=for_viewer(request, principal, jobs.job_list(store, filters)),
        filters=filters,
        statuses=JOB_STATUSES,
        kinds=jobs.KINDS,
        users=jobs.job_users(store),
        final=jobs.FINAL_STATUSES,
        limit=jobs.JOBS_PAGE_LIMIT,
        can_cancel=kit.role_at_least(principal, "runner"),
    )


@router.post("/jobs/{job_id}/cancel")
async def job_cancel(request: Request, job_id: str, principal: SignedIn) -> Response:
    """The jobs page's cancel button (CSRF token and role 'runner'): the API's cancel, then back to the list."""
    from starlette.concurrency import run_in_threadpool

    from repliscope.service.routers.jobs import cancel_job

    if not kit.role_at_least(principal, "runner"):  # the role before the form is read
        return kit.error_page(
            principal,
            403,
            f"cancelling a job needs the role 'runner'; the token '{principal.name}' has '{principal.role}'",
        )
    form = await request.form(max_files=0, max_fields=5)
    if not kit.form_csrf_ok(form, principal):
        return kit.error_page(principal, 403, CSRF_REFUSED)
    try:
        await run_in_threadpool(cancel_job, request, job_id, principal)
    except ApiError as exc:
        return kit.error_page(principal, exc.status, exc.message)
    return RedirectResponse(kit.safe_next(str(form.get("next") or "/jobs")), status_code=303)


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: str, principal: SignedIn) -> Response:
    from repliscope.service.web import job_pages as jobs

    job = jobs.job_view(kit.store_of(request), job_id)
    if job is None:
        return kit.error_page(principal, 404, f"unknown job id '{job_id}'")
    return kit.page(principal, "job.html", title=f"Job {job_id}", job=for_viewer(request, principal, job))


# --- agents and stack matrices ------------------------------------------------------------------------------


@router.get("/agents", response_class=HTMLResponse)
def agents_page(request: Request, principal: SignedIn) -> Response:
    from repliscope.service.routers.agents import list_agents
    from repliscope.service.web import agents

    error = None
    try:
        rows = agents.agent_rows(list_agents(request))
    except (ApiError, RepliscopeError, OSError) as exc:  # the page still lists the stored matrices
        rows, error = [], f"cannot list the agents: {exc}"
    matrices = agents.matrix_links(kit.store_of(request).list_stack_matrices(limit=50))
    rows, matrices, error = for_viewer(request, principal, (rows, matrices, error))
    return kit.page(principal, "agents.html", title="Agents", agents=rows, matrices=matrices, error=error)


@router.get("/stack-matrices/{matrix_id}", response_class=HTMLResponse)
def stack_matrix_page(request: Request, matrix_id: str, principal: SignedIn) -> Response:
    from repliscope.service.web import agents

    try:
        matrix = kit.store_of(request).get_stack_matrix(matrix_id)
    except StoreError as exc:
        return kit.error_page(principal, 404, str(exc))
    page = for_viewer(request, principal, agents.matrix_page(matrix))
    return kit.page(principal, "stack_matrix.html", title=f"Stack matrix {page.matrix_id[:12]}", m=page)

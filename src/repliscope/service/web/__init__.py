"""The server-rendered web UI (Jinja2 templates, CSS and the job page's polling script written here: no CDN).

``router`` holds every page; :func:`repliscope.service.app.create_app` includes it. Pages: ``/login``, ``/``
(models), ``/models/{name}``, ``/runs``, ``/runs/{id}``, ``/compare?a=&b=``, ``/new`` (run wizard),
``/jobs/{id}``; assets under ``/static/``.
"""

from repliscope.service.web.page_kit import LoginRequired, login_redirect
from repliscope.service.web.routes import router

__all__ = ["LoginRequired", "login_redirect", "router"]

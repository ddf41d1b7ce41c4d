"""``/docs`` and ``/redoc`` work offline: their pages reference only this server's URLs, the Swagger UI / ReDoc
assets are served by the app (:mod:`repliscope.service.api_docs`), and a real browser renders the operations."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any

import pytest
from fastapi.testclient import TestClient

from repliscope.service.api_docs import ASSETS, ASSETS_PREFIX
from tests.service.browser_support import browser_paths, chromium_driver, live_server

CONTENT_TYPES = {"js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8", "png": "image/png"}


class References(HTMLParser):
    """Every ``src`` and ``href`` of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]


def references(html: str) -> list[str]:
    parser = References()
    parser.feed(html)
    return parser.urls


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        ("/docs", ["swagger-ui.css", "favicon.png", "swagger-ui-bundle.js"]),
        ("/redoc", ["favicon.png", "redoc.standalone.js"]),
    ],
)
def test_the_docs_pages_reference_only_this_server(client: TestClient, page: str, expected: list[str]) -> None:
    r = client.get(page)  # no token: the API's description is public, as before
    assert r.status_code == 200 and r.headers["content-type"] == "text/html; charset=utf-8"
    assert re.findall(r"https?://[^\s\"'<>]+", r.text) == []  # no CDN, no font service, no validator
    assert references(r.text) == [f"{ASSETS_PREFIX}/{name}" for name in expected]
    assert "'/openapi.json'" in r.text or '"/openapi.json"' in r.text
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "img-src 'self' data:" in csp and "frame-ancestors 'none'" in csp


def test_the_assets_are_served_with_their_content_type(client: TestClient) -> None:
    sizes = {}
    for name in ASSETS:
        r = client.get(f"{ASSETS_PREFIX}/{name}")
        assert r.status_code == 200, name
        assert r.headers["content-type"] == CONTENT_TYPES[name.rsplit(".", 1)[1]]
        assert r.headers["cache-control"] == "public, max-age=86400"
        assert r.headers["x-content-type-options"] == "nosniff"
        sizes[name] = len(r.content)
    assert client.get(f"{ASSETS_PREFIX}/favicon.png").content.startswith(b"\x89PNG\r\n\x1a\n")
    bundle = client.get(f"{ASSETS_PREFIX}/swagger-ui-bundle.js").text
    assert "SwaggerUIBundle" in bundle
    assert "Redoc" in client.get(f"{ASSETS_PREFIX}/redoc.standalone.js").text
    assert min(sizes["swagger-ui-bundle.js"], sizes["redoc.standalone.js"]) > 500_000  # the real builds


def test_an_unknown_asset_is_a_404_naming_the_served_ones(client: TestClient) -> None:
    r = client.get(f"{ASSETS_PREFIX}/core.py")  # a file of the package, not an asset
    assert r.status_code == 404
    error = r.json()["error"]
    assert error["code"] == "not_found"
    assert error["message"] == (
        "no such docs asset 'core.py' (served: swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js, favicon.png)"
    )
    assert client.get(f"{ASSETS_PREFIX}/..%2F__init__.py").status_code == 404


# --- a real browser ---------------------------------------------------------------------------------------------


@pytest.fixture
def browser(service_app: Any) -> Iterator[tuple[Any, str]]:
    chromium, chromedriver = browser_paths()
    with live_server(service_app) as url, chromium_driver(chromium, chromedriver) as driver:
        yield driver, url


def _resources(driver: Any) -> list[str]:
    return list(driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)"))


@pytest.mark.browser
def test_swagger_ui_and_redoc_render_the_operations_from_local_assets(browser: tuple[Any, str]) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver, url = browser
    driver.get(f"{url}/docs")
    WebDriverWait(driver, 60).until(ec.presence_of_element_located((By.CSS_SELECTOR, ".opblock-summary-path")))
    paths = {e.get_attribute("data-path") for e in driver.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
    assert {"/api/v1/runs", "/api/v1/runs/{run_id}", "/api/v1/health"} <= paths
    assert driver.find_element(By.CSS_SELECTOR, "#operations-runs-query_runs_api_v1_runs_get").is_displayed()
    assert "repliscope" in driver.find_element(By.CSS_SELECTOR, ".info .title").text
    loaded = _resources(driver)
    assert loaded and all(u.startswith(url) for u in loaded), loaded

    driver.get(f"{url}/redoc")
    WebDriverWait(driver, 60).until(
        ec.presence_of_element_located(
            (By.CSS_SELECTOR, "[data-section-id='tag/runs/operation/query_runs_api_v1_runs_get']")
        )
    )
    assert driver.find_element(By.CSS_SELECTOR, "h1").text.startswith("repliscope")
    headings = [h.text for h in driver.find_elements(By.CSS_SELECTOR, "h2")]
    assert "Query Runs" in headings
    loaded = _resources(driver)
    assert f"{url}{ASSETS_PREFIX}/redoc.standalone.js" in loaded
    # ReDoc's sidebar credit shows its logo from the bundle (a data: image): nothing is asked of Redocly's CDN
    assert [u for u in loaded if not u.startswith(url)] == []
    logo = driver.find_element(By.CSS_SELECTOR, "img[alt='redocly logo']")
    assert logo.get_attribute("src").startswith("data:image/svg+xml;base64,")
    assert driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth", logo) == 16
    # the description's `Authorization: Bearer <token>` is rendered as code, not eaten as an HTML tag
    assert "Authorization: Bearer <token>" in driver.find_element(By.CSS_SELECTOR, "body").text

    driver.get(f"{url}/docs")  # the bearer scheme: Swagger UI's Authorize button and a lock on each operation
    WebDriverWait(driver, 60).until(ec.presence_of_element_located((By.CSS_SELECTOR, "button.authorize")))
    assert driver.find_element(By.CSS_SELECTOR, "button.authorize").is_displayed()
    assert "Authorization: Bearer <token>" in driver.find_element(By.CSS_SELECTOR, ".info .description").text
    locks = driver.find_elements(By.CSS_SELECTOR, ".opblock .authorization__btn")
    operations = driver.find_elements(By.CSS_SELECTOR, ".opblock")
    assert len(locks) == len(operations) - 1  # every operation but /api/v1/health

"""Issue 36 item 3: the wizard no longer dead-ends on an empty store. A runner uploads a manifest from the page
(``POST /new/manifest``: a file or pasted text, the CSRF token, bounded by the server's upload limit), validated
and stored by the API's own code (the same messages naming file, line and field); success lands back in the
wizard with it chosen. The hostile inputs are the tests: a manifest naming a shell command as code, a local path,
malformed YAML, a body past the limit, a post without the CSRF token, from another site or by a viewer; none is
stored."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LITE0
from tests.service.conftest import WebClient
from tests.service.test_code_allowlist import with_architecture
from tests.service.test_web_pages import assert_accessible, logged_in

LITE0_REF = "efficientnet-lite0@1.0.0"
UPLOAD = "/new/manifest"


@pytest.fixture
def runner(service_app: Any, tokens: dict[str, str]) -> WebClient:
    return logged_in(service_app, tokens["runner"])


def post_upload(client: WebClient, *, file: tuple[str, bytes] | None = None, text: str = "", **extra: str) -> Any:
    data = {"csrf_token": client.page_csrf(UPLOAD), "text": text, **extra}
    files = {"file": (file[0], file[1], "text/yaml")} if file else {"file": ("", b"", "application/octet-stream")}
    return client.post(UPLOAD, data=data, files=files, follow_redirects=False)


def stored_refs(service_app: Any) -> list[str]:
    from repliscope.store.service_tables import list_manifests

    return [f"{m.name}@{m.version}" for m in list_manifests(service_app.state.store)]


def refusal(html: str) -> tuple[str, list[str]]:
    """The upload's refusal on the page: (field, message lines)."""
    field = re.search(r'id="upload-error-field">(.*?)</strong>', html)
    block = re.search(r'id="upload-error"(.*?)</div>', html, re.S)
    assert field is not None and block is not None, html[:3000]
    return unescape(field.group(1)), [unescape(li) for li in re.findall(r"<li>(.*?)</li>", block.group(1), re.S)]


def test_an_empty_store_offers_the_upload_form_not_a_dead_end(runner: WebClient) -> None:
    page = runner.get("/new")
    assert page.status_code == 200
    html = page.text
    assert '<details class="card" id="upload-details" open><summary>Upload a manifest</summary>' in html
    form = re.search(r'<form method="post" action="/new/manifest" enctype="multipart/form-data"[^>]*>', html)
    assert form is not None and 'data-max-bytes="1044480"' in form.group(0)  # 1 MiB less the form's overhead
    assert 'No manifest is stored yet: <a href="#upload-details">upload one above</a>' in html
    assert "at most 1,044,480 bytes" in html
    assert re.search(r'<input id="upload-file" name="file" type="file"', html)
    assert_accessible(html)


def test_an_uploaded_file_lands_in_the_wizard_with_it_chosen(service_app: Any, runner: WebClient) -> None:
    text = LITE0.read_bytes()
    r = post_upload(runner, file=("efficientnet-lite0.yaml", text))
    assert r.status_code == 303, r.text[:2000]
    assert (
        r.headers["location"]
        == "/new?manifest=efficientnet-lite0%40efficientnet-lite0".replace(
            "efficientnet-lite0%40efficientnet-lite0", "efficientnet-lite0%401.0.0"
        )
        + "&uploaded=created"
    )
    page = runner.get(r.headers["location"]).text
    assert unescape(re.search(r'id="upload-result">(.*?)</p>', page).group(1)) == (  # type: ignore[union-attr]
        "efficientnet-lite0@1.0.0 was validated and stored: it is chosen below."
    )
    chosen = re.search(r'<select id="wizard-manifest".*?</select>', page, re.S)
    assert chosen is not None and re.search(rf'<option value="{LITE0_REF}"[^>]* selected>', chosen.group(0))
    assert stored_refs(service_app) == [LITE0_REF]
    from repliscope.store.service_tables import get_manifest

    stored = get_manifest(service_app.state.store, LITE0_REF)
    assert stored.text == text.decode("utf-8") and stored.uploaded_by == "test-runner"
    again = post_upload(runner, text=text.decode("utf-8"))  # the same text, pasted: already stored
    assert again.status_code == 303 and again.headers["location"].endswith("&uploaded=stored")
    landed = runner.get(again.headers["location"]).text
    assert "was already stored with this text" in landed
    assert '<details class="card" id="upload-details"><summary>' in landed  # closed once a manifest is stored


def test_an_uploaded_name_is_said_only_when_that_manifest_is_stored(runner: WebClient) -> None:
    page = runner.get("/new?manifest=forged%401.0&uploaded=created").text
    assert 'id="upload-result"' not in page and "forged" not in page.split("<form", 1)[0]


def test_a_malformed_manifest_is_refused_with_file_line_and_field(service_app: Any, runner: WebClient) -> None:
    bad = LITE0.read_text(encoding="utf-8").replace("task: image_classification", "task: classification", 1)
    bad = bad.replace("  sha256: ", "  sha256: 0", 1)
    r = post_upload(runner, file=("my model.yaml", bad.encode()))
    assert r.status_code == 422
    field, lines = refusal(r.text)
    assert field == "task"
    assert "my_model.yaml:5: field 'task': 'classification' is not allowed (allowed: image_classification, " in (
        "\n".join(lines)
    )
    assert any(re.match(r"my_model\.yaml:\d+: field 'source\.sha256': ", line) for line in lines), lines
    broken = post_upload(runner, text="name: x\nclaims: [1, 2\nversion: 1\n")
    assert broken.status_code == 422
    assert refusal(broken.text) == (
        "text",
        ["pasted.yaml:3: malformed YAML: while parsing a flow sequence, did not find expected ',' or ']'"],
    )
    assert stored_refs(service_app) == []
    assert_accessible(broken.text)


def test_a_manifest_naming_a_shell_command_as_code_is_refused_and_never_runs(
    service_app: Any, runner: WebClient, tmp_path: Path
) -> None:
    sentinel = tmp_path / "SENTINEL"
    text = with_architecture("os:system", "torch")
    text = text.replace("    model_name: efficientnet-lite0\n", f'    command: "touch {sentinel}"\n', 1)
    r = post_upload(runner, file=("lite0.yaml", text.encode()))
    assert r.status_code == 422
    assert refusal(r.text) == (
        "architecture.package",
        [
            "'torch': this server loads architecture code only from the packages its admin allowed "
            "(allowed: efficientnet-lite-pytorch); an admin allows a package with "
            "`repliscope serve --allow-architecture-package NAME`"
        ],
    )
    assert not sentinel.exists() and stored_refs(service_app) == []


def test_a_manifest_reading_a_server_path_is_refused(service_app: Any, runner: WebClient) -> None:
    text = re.sub(r"(?m)^  uri: .*$", "  uri: /etc/passwd", LITE0.read_text(encoding="utf-8"), count=1)
    r = post_upload(runner, text=text)
    assert r.status_code == 422
    field, lines = refusal(r.text)
    assert field == "source.uri" and lines[0].startswith("'/etc/passwd': an uploaded manifest may only use package://")
    assert stored_refs(service_app) == []


def test_an_oversized_upload_is_refused_before_it_is_read_and_nothing_is_stored(
    service_app: Any, runner: WebClient
) -> None:
    from repliscope.service.web.wizard import FORM_OVERHEAD_BYTES

    limit = service_app.state.config.max_upload_bytes
    padding = "#" * (limit - FORM_OVERHEAD_BYTES) + "\n"  # a comment: valid YAML, one byte over the page's bound
    r = post_upload(runner, file=("big.yaml", (padding + LITE0.read_text(encoding="utf-8"))[: limit - 2048].encode()))
    assert r.status_code == 413
    assert refusal(r.text) == ("file", [f"the manifest is larger than this page's limit of {limit - 4096:,} bytes"])
    whole = post_upload(runner, file=("huge.yaml", b"#" * (limit + 1)))  # past the server's request limit
    assert whole.status_code == 413 and whole.json()["error"]["code"] == "too_large"
    assert stored_refs(service_app) == []


def test_an_upload_without_the_csrf_token_from_another_site_or_by_a_viewer_stores_nothing(
    service_app: Any, tokens: dict[str, str], runner: WebClient
) -> None:
    files = {"file": ("lite0.yaml", LITE0.read_bytes(), "text/yaml")}
    no_token = runner.post(UPLOAD, data={}, files=files, follow_redirects=False)
    assert no_token.status_code == 403 and "CSRF token missing or wrong" in no_token.text
    foreign = runner.post(
        UPLOAD,
        data={"csrf_token": runner.page_csrf(UPLOAD)},
        files=files,
        headers={"Origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "cross_origin"
    viewer = logged_in(service_app, tokens["viewer"])
    assert 'id="upload-file" name="file" type="file" accept=".yaml,.yml,text/yaml,application/yaml" ' in (
        viewer.get("/new").text
    )
    r = post_upload(viewer, file=("lite0.yaml", LITE0.read_bytes()))
    assert r.status_code == 403
    assert refusal(r.text) == (
        "file",
        ["uploading a manifest needs the role 'runner'; the token 'test-viewer' has 'viewer'"],
    )
    assert stored_refs(service_app) == []


def test_a_file_and_pasted_text_together_or_neither_is_refused_at_the_field(runner: WebClient) -> None:
    both = post_upload(runner, file=("a.yaml", LITE0.read_bytes()), text="name: x\n")
    assert both.status_code == 422 and refusal(both.text) == ("file", ["choose a file or paste the manifest, not both"])
    neither = post_upload(runner)
    assert neither.status_code == 422
    assert refusal(neither.text) == ("file", ["choose a manifest file (.yaml) or paste its text"])
    latin1 = post_upload(runner, file=("latin.yaml", "name: caf\xe9\n".encode("latin-1")))
    assert latin1.status_code == 422 and refusal(latin1.text) == ("file", ["latin.yaml is not UTF-8 text"])


# --- a real browser ---------------------------------------------------------------------------------------------


@pytest.fixture
def browser(service_app: Any, tokens: dict[str, str]) -> Iterator[tuple[Any, str, str]]:
    from tests.service.browser_support import browser_paths, chromium_driver, live_server

    chromium, chromedriver = browser_paths()
    with live_server(service_app) as url, chromium_driver(chromium, chromedriver) as driver:
        yield driver, url, tokens["runner"]


@pytest.mark.browser
def test_a_runner_uploads_from_the_wizard_in_a_browser(browser: tuple[Any, str, str], tmp_path: Path) -> None:
    """One browser session: an oversized paste is stopped by the page before it is sent, a malformed file is
    refused with its line, the real manifest lands in the wizard chosen (a few seconds: chromium's start)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from tests.service.browser_support import at_path, poll, screenshot

    driver, url, token = browser
    driver.get(f"{url}/login?next=/new")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "login").click()
    poll(lambda: at_path(driver, "/new"), timeout=20, what="the wizard after login")
    assert driver.find_element(By.ID, "wizard-no-manifest").text.startswith("No manifest is stored yet: upload one")

    driver.execute_script("document.getElementById('upload-text').value = '#'.repeat(2000000);")
    driver.find_element(By.ID, "upload-submit").click()
    note = driver.find_element(By.ID, "upload-size-error")
    assert note.is_displayed()
    assert note.text == "the pasted text is 2,000,000 bytes; this server takes manifests of at most 1,044,480 bytes"
    assert driver.current_url.endswith("/new")  # nothing was sent
    driver.execute_script("document.getElementById('upload-text').value = '';")

    bad = tmp_path / "broken.yaml"
    bad.write_text("name: x\nclaims: [1, 2\nversion: 1\n", encoding="utf-8")
    driver.find_element(By.ID, "upload-file").send_keys(str(bad))
    driver.find_element(By.ID, "upload-submit").click()
    error = poll(lambda: driver.find_elements(By.ID, "upload-error"), timeout=20, what="the upload's refusal")[0]
    assert "broken.yaml:3: malformed YAML" in error.text and str(tmp_path) not in error.text

    good = tmp_path / "efficientnet-lite0.yaml"
    good.write_bytes(LITE0.read_bytes())
    driver.find_element(By.ID, "upload-file").send_keys(str(good))
    driver.find_element(By.ID, "upload-submit").click()
    poll(lambda: "uploaded=created" in driver.current_url, timeout=20, what="the wizard after the upload")
    assert driver.find_element(By.ID, "upload-result").text.startswith(f"{LITE0_REF} was validated and stored")
    assert Select(driver.find_element(By.ID, "wizard-manifest")).first_selected_option.get_attribute("value") == (
        LITE0_REF
    )
    assert "onnxruntime" in [
        o.get_attribute("value") for o in Select(driver.find_element(By.ID, "wizard-runtime")).options
    ]
    screenshot(driver, "wizard-upload")

"""Claims, datasets and the wizard's fit filtering in a real browser (chromium + selenium, like
``test_browser.py``), each page at 1280 and 390 px (no sideways scrolling; screenshots in ``test-artifacts/``):
the datasets page with its declarations and the admin's form, the models pages' badges with value, interval and
direction (beats is not the red of falls short), and the wizard offering only what fits the chosen manifest."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, LITE0
from tests.service.browser_support import browser_paths, chromium_driver, live_server, poll, screenshot, set_width

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("uvicorn", reason="the 'service' extra is not installed")
pytest.importorskip("selenium", reason="selenium is not installed (the 'dev' extra)")

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

pytestmark = pytest.mark.browser

LITE0_REF = "efficientnet-lite0@1.0.0"
BLAZEFACE_REF = "blazeface-full-range@1.0.0"


@dataclass
class Site:
    url: str
    admin: str
    runner: str
    viewer: str
    chromium: str
    chromedriver: str
    folder: Path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The service on a tmp store with Lite0 and BlazeFace stored, a face dataset (boxes) and a 20-image ImageNet
    copy declared as imagenet-1k/val registered, and two judged runs: one beating its claim, one falling short."""
    chromium, chromedriver = browser_paths()
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.accounts import create_token
    from repliscope.store.service_tables import put_manifest, register_dataset
    from tests.service.test_claims_pages import BEATS_RUN, SHORT_RUN, judged
    from tests.service.test_wizard_fit import face_dataset

    root = tmp_path_factory.mktemp("browser-claims")
    (root / "cache").mkdir()
    app = create_app(ServiceConfig(db_url=f"sqlite:///{root / 'runs.db'}", cache_dir=root / "cache"))
    store = app.state.store
    admin, _ = first_start(store)
    assert admin is not None
    put_manifest(store, "efficientnet-lite0", "1.0.0", LITE0.read_text(encoding="utf-8"))
    put_manifest(
        store, "blazeface-full-range", "1.0.0", (EXAMPLES / "blazeface-full-range.yaml").read_text(encoding="utf-8")
    )
    register_dataset(store, "faces", f"dlib_xml:{face_dataset(root)}", created_by="admin")
    register_dataset(store, "imagenet-20", "foolbox_imagenet", created_by="admin", declared_as="imagenet-1k/val")
    store.save(judged(BEATS_RUN, 0.10, "onnxruntime"))
    store.save(judged(SHORT_RUN, 0.99, "torch"))
    with live_server(app) as url:
        yield Site(
            url,
            admin,
            create_token(store, "browser-runner", "runner"),
            create_token(store, "browser-viewer", "viewer"),
            chromium,
            chromedriver,
            root / "faces",
        )
    app.state.executor.shutdown(wait=True)
    app.state.cluster.close()


@pytest.fixture
def driver(site: Site) -> Iterator[WebDriver]:
    with chromium_driver(site.chromium, site.chromedriver) as d:
        yield d


def login(driver: WebDriver, site: Site, token: str) -> None:
    driver.get(f"{site.url}/login")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "login").click()
    poll(lambda: "/login" not in driver.current_url, timeout=20, what="the redirect away from /login")


def test_models_pages_tell_beats_from_falls_short(site: Site, driver: WebDriver) -> None:
    login(driver, site, site.viewer)
    for url, name in (("/", "claims-models"), ("/models/efficientnet-lite0", "claims-model")):
        driver.get(f"{site.url}{url}")
        beats = driver.find_element(By.CSS_SELECTOR, ".badge.direction-beats[data-direction]")
        short = driver.find_element(By.CSS_SELECTOR, ".badge.direction-short[data-direction]")
        assert (beats.text, short.text) == ("▲ beats its claim", "▼ falls short of its claim")
        beats_colour, short_colour = beats.value_of_css_property("color"), short.value_of_css_property("color")
        assert beats_colour == "rgba(11, 79, 138, 1)" and short_colour == "rgba(179, 38, 30, 1)"
        assert beats.value_of_css_property("background-color") != short.value_of_css_property("background-color")
        verdicts = driver.find_elements(By.CSS_SELECTOR, '.badge[data-verdict="inconsistent"]')
        colours = {b.text: b.value_of_css_property("color") for b in verdicts}
        assert colours == {"inconsistent ▲": "rgba(11, 79, 138, 1)", "inconsistent ▼": "rgba(179, 38, 30, 1)"}
        lines = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".claim-line")]
        assert any(line.endswith("· claimed 10.00 %") and "(95 % interval " in line for line in lines), lines
        assert any(line.endswith("· claimed 99.00 %") for line in lines), lines
        screenshot(driver, name)
        set_width(driver, 390)
        assert beats.is_displayed() and short.is_displayed()


def test_datasets_page_shows_declarations_and_an_admin_declares(site: Site, driver: WebDriver) -> None:
    login(driver, site, site.viewer)
    driver.get(f"{site.url}/datasets")
    row = driver.find_element(By.CSS_SELECTOR, 'tr[data-dataset="imagenet-20"]')
    assert "imagenet-1k/val" in row.text and "declared by admin on" in row.text
    assert driver.find_elements(By.ID, "register-form") == []
    screenshot(driver, "datasets")

    login(driver, site, site.admin)
    driver.get(f"{site.url}/datasets")
    driver.find_element(By.ID, "dataset-name").send_keys("faces-as-wider")
    driver.find_element(By.ID, "dataset-spec").send_keys(f"dlib_xml:{site.folder / 'faces.xml'}")
    driver.find_element(By.ID, "dataset-as").send_keys("wider-face/val")
    driver.find_element(By.ID, "register-submit").click()
    row = poll(
        lambda: next(iter(driver.find_elements(By.CSS_SELECTOR, 'tr[data-dataset="faces-as-wider"]')), None),
        timeout=20,
        what="the newly registered dataset's row",
    )
    assert "wider-face/val" in row.text and "declared by admin on" in row.text and "boxes" in row.text
    screenshot(driver, "datasets-admin")


def offered(driver: WebDriver, select_id: str) -> list[str]:
    return [
        str(o.get_attribute("value"))
        for o in Select(driver.find_element(By.ID, select_id)).options
        if o.get_attribute("value") and o.is_enabled()
    ]


def test_the_wizard_offers_only_what_fits_the_chosen_manifest(site: Site, driver: WebDriver) -> None:
    login(driver, site, site.runner)
    driver.get(f"{site.url}/new")
    manifest = Select(driver.find_element(By.ID, "wizard-manifest"))
    manifest.select_by_value(LITE0_REF)
    assert offered(driver, "wizard-runtime") == ["onnxruntime", "opencv_dnn", "torch"]
    assert offered(driver, "wizard-dataset") == ["foolbox_imagenet", "imagenet-20"]
    why = driver.find_element(By.ID, "wizard-dataset-why").text  # (the datasets test may have registered one more)
    assert why.startswith(f"Not offered for {LITE0_REF}: faces (its samples carry boxes; image_classification scores")
    assert "tflite runs tflite sources, not pytorch_state_dict" in driver.find_element(By.ID, "wizard-runtime-why").text
    Select(driver.find_element(By.ID, "wizard-claim")).select_by_value("imagenet-1k/val")
    assert offered(driver, "wizard-dataset") == ["imagenet-20"]
    assert Select(driver.find_element(By.ID, "wizard-dataset")).first_selected_option.get_attribute("value") == (
        "imagenet-20"
    )
    Select(driver.find_element(By.ID, "wizard-kind")).select_by_value("pitfalls")
    variants = [e.get_attribute("value") for e in driver.find_elements(By.CSS_SELECTOR, "#wizard-variants input")]
    visible = [
        v
        for v, e in zip(variants, driver.find_elements(By.CSS_SELECTOR, "#wizard-variants .variant"), strict=True)
        if e.is_displayed()
    ]
    from repliscope.pitfalls.sweep import task_pitfalls

    assert visible == task_pitfalls("image_classification")
    screenshot(driver, "wizard-fit-lite0")

    manifest.select_by_value(BLAZEFACE_REF)
    assert offered(driver, "wizard-runtime") == ["onnxruntime", "opencv_dnn", "tflite"]
    assert set(offered(driver, "wizard-dataset")) - {"faces-as-wider"} == {"faces"}
    assert "torch runs pytorch_state_dict sources, not tflite" in driver.find_element(By.ID, "wizard-runtime-why").text
    visible = [
        e.get_attribute("data-variant")
        for e in driver.find_elements(By.CSS_SELECTOR, "#wizard-variants .variant")
        if e.is_displayed()
    ]
    assert visible == task_pitfalls("object_detection")
    screenshot(driver, "wizard-fit-blazeface")
    Select(driver.find_element(By.ID, "wizard-kind")).select_by_value("bench")
    assert driver.find_element(By.ID, "wizard-duration").is_displayed()
    assert not driver.find_element(By.ID, "wizard-variants").is_displayed()


def test_a_misfit_posted_anyway_is_named_at_its_field(site: Site, driver: WebDriver) -> None:
    """A form posted with a misfit (the option enabled by hand, as a script could): the error sits at the field."""
    login(driver, site, site.runner)
    driver.get(f"{site.url}/new")
    Select(driver.find_element(By.ID, "wizard-manifest")).select_by_value(LITE0_REF)
    driver.execute_script(
        "const o = document.querySelector('#wizard-runtime option[value=tflite]');"
        "o.disabled = false; o.hidden = false; document.getElementById('wizard-runtime').value = 'tflite';"
    )
    driver.find_element(By.ID, "wizard-submit").click()
    error = poll(
        lambda: next(iter(driver.find_elements(By.ID, "wizard-runtime-error")), None),
        timeout=20,
        what="the error at the runtime field",
    )
    assert error.text.startswith(f"runtime: tflite does not run {LITE0_REF}: it runs tflite sources")
    screenshot(driver, "wizard-misfit")

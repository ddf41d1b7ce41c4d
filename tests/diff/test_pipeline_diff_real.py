"""The pipeline diff on real ImageNet images (``../shared/data/imagenet-sample``; skipped when absent): the
independent Lite0 pipeline matches bit for bit, and ``--model-effect`` feeds both inputs of a BGR candidate through
the model (top-1 agreement, flips, McNemar)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.datasets import resolve_dataset
from repliscope.diff.pipeline.candidate import load_candidate
from repliscope.diff.pipeline.driver import diff_pipeline
from repliscope.manifest.loader import load_manifest
from tests.conftest import LITE0
from tests.diff import pipeline_candidates as pc

CANDIDATES = Path(pc.__file__)


def test_independent_lite0_matches_on_real_images(imagenet_sample: Path) -> None:
    data = resolve_dataset(str(imagenet_sample))
    r = diff_pipeline(load_manifest(LITE0), load_candidate(f"{CANDIDATES}:lite0"), data.samples[:40], data.name)
    assert (r.verdict, r.samples, r.failed, r.max_abs_error) == ("match", 40, 0, 0.0)
    assert r.timing.samples_timed == 39


@pytest.mark.slow
def test_model_effect_of_swapped_channels(imagenet_sample: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app,
        [
            "diff",
            str(LITE0),
            "--pipeline",
            f"{CANDIDATES}:color_layout_swapped",
            "--dataset",
            str(imagenet_sample),
            "--limit",
            "24",
            "--model-effect",
            "--model-runtime",
            "onnxruntime",
            "--json",
            "--db",
            f"sqlite:///{tmp_path / 'd.db'}",
        ],
    )
    assert res.exit_code == 1, res.output
    body = json.loads(res.stdout)["pipeline_diff"]
    assert body["diagnosis"]["variant"] == "color_layout_swapped"
    effect = body["model_effect"]
    assert (effect["source"], effect["compared"], effect["a"]) == ("pipelines", 24, "manifest pipeline")
    assert effect["agreements"] == 18 and len(effect["flips"]) == 6
    assert effect["flips"][0] == {"sample_id": "n01514668_cock.JPEG", "label": 7, "top1_a": 7, "top1_b": 84}
    assert effect["mcnemar"]["n"] == 24 and effect["mcnemar"]["only_a_correct"] == 3

"""One unreadable file never loses the run: every file is read exactly once (by the loop), an unreadable one
is a failed sample with its reason, the identity covers what was read, and the record is stored.
A fake runner stands in for the model (the real manifest's pipeline runs; class 7 always wins)."""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from repliscope.datasets import Dataset, load_image_folder, resolve_dataset
from repliscope.evaluation.engine import LoopOptions, prepare_sample, run_loop
from repliscope.evaluation.run import PreparedRun, RunSettings, evaluate, prepare
from repliscope.pitfalls.sweep import run_sweep
from repliscope.runtimes.base import ModelArtifact, Runner
from tests.conftest import LITE0

DANGLING = "unreadable: dangling symlink (target 'nowhere.png' does not exist)"
FIFO = "unreadable: not a regular file (a FIFO)"


class FakeRunner(Runner):
    name = "fake"

    def __init__(self, artifact: ModelArtifact, *, threads: int, cache_dir: Path) -> None:
        super().__init__(artifact, threads=threads, cache_dir=cache_dir)

    def framework(self) -> tuple[str, str]:
        return "fake", "1.0"

    def _load(self) -> None:
        pass

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        scores = np.zeros((batch.shape[0], 1000), dtype=np.float32)
        scores[:, 7] = 10.0
        return scores


@pytest.fixture(scope="module")
def lite0(tmp_path_factory: pytest.TempPathFactory) -> PreparedRun:
    prepared = prepare(LITE0, RunSettings(runtime="torch", threads=1, batch_size=2))  # nothing loaded yet
    fake = FakeRunner(prepared.artifact, threads=1, cache_dir=tmp_path_factory.mktemp("fake"))
    return replace(prepared, runner=fake)


def png(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (30, 40, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def broken_folder(root: Path) -> Path:
    """3 good PNGs, a dangling symlink and a FIFO named like images, and 2 non-image files."""
    root.mkdir()
    for i in (1, 2, 4):
        (root / f"img_{i}.png").write_bytes(png(i))
    (root / "lost_3.png").symlink_to("nowhere.png")
    os.mkfifo(root / "pipe_5.png")
    (root / "README.md").write_text("about these images")
    (root / "anim.gif").write_bytes(b"GIF89a")
    return root


def counting(dataset: Dataset) -> tuple[Dataset, Counter[str]]:
    """The same dataset whose samples count every read attempt."""
    reads: Counter[str] = Counter()

    def wrap(sample_id: str, read: Callable[[], bytes]) -> Callable[[], bytes]:
        def counted() -> bytes:
            reads[sample_id] += 1
            return read()

        return counted

    samples = [replace(s, read=wrap(s.id, s.read)) for s in dataset.samples]
    return replace(dataset, samples=samples), reads


def expected_identity(root: Path, ids: list[str], labels: list[int], reasons: dict[str, str]) -> str:
    h = hashlib.sha256()
    for i, label in zip(ids, labels, strict=True):
        digest = reasons[i].encode() if i in reasons else hashlib.sha256((root / i).read_bytes()).digest()
        h.update(i.encode() + b"\0" + digest + str(label).encode() + b"\n")
    return h.hexdigest()


IDS = ["img_1.png", "img_2.png", "img_4.png", "lost_3.png", "pipe_5.png"]
LABELS = [1, 2, 4, 3, 5]


def test_unreadable_files_fail_alone_and_every_file_is_read_once(lite0: PreparedRun, tmp_path: Path) -> None:
    root = broken_folder(tmp_path / "data")
    data, reads = counting(load_image_folder(root, "filename_index"))
    assert reads == Counter()  # loading the dataset reads nothing
    rec = evaluate(lite0, data)
    assert reads == Counter(dict.fromkeys(IDS, 1))  # the identity did not re-read anything
    assert [s.sample_id for s in rec.samples] == IDS
    assert {s.sample_id: s.error for s in rec.samples if s.error} == {"lost_3.png": DANGLING, "pipe_5.png": FIFO}
    # every class but 7 scores the same: each evaluated label sits in the tie across the top-5 boundary
    assert rec.counts == {"total": 5, "evaluated": 3, "failed": 2, "labelled": 5, "label_ties_top5": 3}
    assert [s.top1 for s in rec.samples] == [7, 7, 7, None, None]
    assert rec.dataset["identity"] == expected_identity(root, IDS, LABELS, {"lost_3.png": DANGLING, "pipe_5.png": FIFO})
    assert rec.dataset["ignored_files"] == ["README.md", "anim.gif"] and rec.dataset["num_ignored_files"] == 2


def test_all_readable_identity_is_the_datasets_identity(lite0: PreparedRun, tmp_path: Path) -> None:
    root = tmp_path / "ok"
    root.mkdir()
    for i in (1, 2, 3):
        (root / f"img_{i}.png").write_bytes(png(i))
    rec = evaluate(lite0, load_image_folder(root))
    assert rec.dataset["identity"] == load_image_folder(root).identity  # the pre-existing formula, unchanged


def test_loop_returns_one_fingerprint_per_sample(lite0: PreparedRun, tmp_path: Path) -> None:
    root = broken_folder(tmp_path / "data")
    samples = load_image_folder(root, "filename_index").samples
    options = LoopOptions(batch_size=2, prep_workers=2, warmup=False)
    loop = run_loop(lite0.pipeline, lite0.runner, samples, options, (3, 224, 224))
    assert loop.fingerprints == [
        hashlib.sha256((root / "img_1.png").read_bytes()).hexdigest(),
        hashlib.sha256((root / "img_2.png").read_bytes()).hexdigest(),
        hashlib.sha256((root / "img_4.png").read_bytes()).hexdigest(),
        DANGLING,
        FIFO,
    ]


def test_prepare_sample_reports_the_read_failure(lite0: PreparedRun, tmp_path: Path) -> None:
    root = broken_folder(tmp_path / "data")
    lost = load_image_folder(root, "filename_index").samples[3]
    assert prepare_sample(lite0.pipeline, lost, (3, 224, 224)) == (None, DANGLING)


def test_sweep_reads_every_file_once(lite0: PreparedRun, tmp_path: Path) -> None:
    root = broken_folder(tmp_path / "data")
    data, reads = counting(load_image_folder(root, "filename_index"))
    out = run_sweep(lite0, data, ["decoder_swapped", "torchvision_mean_std"], visual_samples=0)
    assert reads == Counter(dict.fromkeys(IDS, 1))
    identity = expected_identity(root, IDS, LABELS, {"lost_3.png": DANGLING, "pipe_5.png": FIFO})
    assert [r.dataset["identity"] for r in out.records] == [identity] * 3
    assert all(r.counts["failed"] == 2 for r in out.records)


def test_foolbox_images_are_read_once_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    real = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        reads.append(self.name)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    data = resolve_dataset("foolbox_imagenet", limit=3)
    assert len(reads) == 20  # each bundled file once, to check it against the wheel's RECORD
    assert data.samples[0].read()[:3] == b"\xff\xd8\xff" and len(reads) == 20  # samples are the verified bytes


def test_cli_stores_the_run_and_lists_skipped_files(tmp_path: Path) -> None:
    """End to end through `repliscope evaluate` (torch runtime on the real model): exit 0, record stored."""
    from repliscope.cli.main import app

    root = broken_folder(tmp_path / "data")
    runner = CliRunner(env={"COLUMNS": "200"})
    result = runner.invoke(
        app,
        [
            "evaluate",
            str(LITE0),
            "--runtime",
            "torch",
            "--dataset",
            str(root),
            "--label-rule",
            "filename_index",
            "--batch-size",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "3 evaluated, 2 failed" in result.output
    assert "ignored   2 non-image files: README.md, anim.gif" in result.output
    assert f"failed lost_3.png: {DANGLING}" in result.output
    assert "Traceback" not in result.output
    listed = runner.invoke(app, ["runs", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    runs = json.loads(listed.output)
    assert len(runs) == 1
    shown = runner.invoke(app, ["runs", "show", runs[0]["run_id"], "--json"])
    assert shown.exit_code == 0, shown.output
    stored = json.loads(shown.output)
    assert stored["counts"] == {"total": 5, "evaluated": 3, "failed": 2, "labelled": 5}
    assert stored["dataset"]["identity"] == expected_identity(
        root, IDS, LABELS, {"lost_3.png": DANGLING, "pipe_5.png": FIFO}
    )

"""End to end on the real model and real images: golden predictions, three runtimes, failures recorded."""

from __future__ import annotations

import io
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from repliscope.datasets import resolve_dataset
from repliscope.errors import ChecksumError, SampleError
from repliscope.evaluation.record import EvaluationRecord
from repliscope.evaluation.run import PreparedRun, RunSettings, evaluate, prepare
from repliscope.manifest.schema import DatasetRef
from tests.conftest import FOOLBOX_LABELS, LITE0, LITE0_FOOLBOX_TOP1

RUNTIMES = ["torch", "onnxruntime", "opencv_dnn"]


@pytest.fixture(scope="module")
def prepared_runs() -> dict[str, PreparedRun]:
    return {rt: prepare(LITE0, RunSettings(runtime=rt, threads=2, batch_size=8)) for rt in RUNTIMES}


@pytest.fixture(scope="module")
def records(prepared_runs: dict[str, PreparedRun]) -> dict[str, EvaluationRecord]:
    data = resolve_dataset("foolbox_imagenet")
    return {rt: evaluate(p, data) for rt, p in prepared_runs.items()}


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_golden_top1_on_foolbox_images(records: dict[str, EvaluationRecord], runtime: str) -> None:
    rec = records[runtime]
    assert [s.label for s in rec.samples] == FOOLBOX_LABELS
    assert [s.top1 for s in rec.samples] == LITE0_FOOLBOX_TOP1
    top1 = rec.metric("top1")
    assert top1 is not None and (top1.successes, top1.n) == (18, 20)
    assert top1.ci_low == pytest.approx(0.6990, abs=1e-4) and top1.ci_high == pytest.approx(0.9721, abs=1e-4)
    assert rec.counts == {"total": 20, "evaluated": 20, "failed": 0, "labelled": 20}
    assert all(len(s.topk_indices) == 5 for s in rec.samples)


def test_runtimes_agree_within_1e4(records: dict[str, EvaluationRecord]) -> None:
    ref = records["torch"]
    for rt in ("onnxruntime", "opencv_dnn"):
        other = records[rt]
        for a, b in zip(ref.samples, other.samples, strict=True):
            assert a.topk_indices[0] == b.topk_indices[0]
            assert abs(a.topk_probs[0] - b.topk_probs[0]) < 1e-4


def test_claim_not_comparable_on_foolbox(records: dict[str, EvaluationRecord]) -> None:
    verdict = records["onnxruntime"].claims[0]
    assert verdict.verdict == "not comparable" and verdict.claimed == 0.751 and verdict.measured == 0.9


def test_record_provenance(records: dict[str, EvaluationRecord]) -> None:
    rec = records["onnxruntime"]
    assert rec.runtime["runtime"] == "onnxruntime" and rec.runtime["threads"] == 2
    assert rec.runtime["export"]["exported_from"] == "torch"
    assert rec.manifest.text == LITE0.read_text()
    assert [op["op"] for op in rec.pipeline["preprocess"]][:3] == ["decode", "resize", "center_crop"]
    assert rec.pipeline["preprocess"][1]["library"] == "pillow"
    assert rec.software["numpy"] == np.__version__
    assert rec.hardware["threads_used"] == 2
    assert rec.dataset["num_samples"] == 20 and len(rec.dataset["identity"]) == 64
    assert len(rec.timings.batch_latencies_seconds) == 3  # 20 samples in batches of 8


def test_result_hash_identical_for_identical_runs(
    prepared_runs: dict[str, PreparedRun], records: dict[str, EvaluationRecord]
) -> None:
    again = evaluate(prepared_runs["onnxruntime"], resolve_dataset("foolbox_imagenet"))
    assert again.result_hash == records["onnxruntime"].result_hash
    assert again.run_id != records["onnxruntime"].run_id


def test_claim_judged_when_declared(prepared_runs: dict[str, PreparedRun]) -> None:
    p = prepared_runs["onnxruntime"]
    declared = replace(p, settings=replace(p.settings, evaluated_as=DatasetRef(name="imagenet-1k", split="val")))
    rec = evaluate(declared, resolve_dataset("foolbox_imagenet"))  # the settings are frozen: a prepared run of its own
    # 18/20 has the 95 % interval [69.9 %, 97.2 %]: 75.1 % lies inside, but ±13.7 pt is too wide to confirm it
    # (issue 35: never "consistent" above a "too few samples" warning)
    claim = rec.claims[0]
    assert (claim.verdict, claim.direction, claim.sampling) == ("not comparable", "within", "selection")
    assert claim.reason.startswith("too few samples to judge: the claimed 75.10 % is inside the 95 % interval")
    assert rec.dataset["sampling"]["kind"] == "selection"


def _bad_images_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "mixed"
    folder.mkdir()
    src = resolve_dataset("foolbox_imagenet").samples
    good = src[0].read()  # imagenet_00_243.jpg
    (folder / "good_243.jpg").write_bytes(good)
    (folder / "truncated_243.jpg").write_bytes(good[: len(good) // 3])
    (folder / "garbage_1.jpg").write_bytes(b"this is not an image at all")
    (folder / "empty_2.jpg").write_bytes(b"")
    gray = io.BytesIO()
    Image.open(io.BytesIO(good)).convert("L").save(gray, format="JPEG", quality=95)
    (folder / "gray_243.jpg").write_bytes(gray.getvalue())
    png = io.BytesIO()
    Image.open(io.BytesIO(good)).save(png, format="PNG")
    (folder / "png_named_jpeg_243.jpg").write_bytes(png.getvalue())
    cmyk = io.BytesIO()
    Image.open(io.BytesIO(good)).convert("CMYK").save(cmyk, format="JPEG", quality=95)
    (folder / "cmyk_243.jpg").write_bytes(cmyk.getvalue())
    return folder


def test_bad_samples_recorded_not_dropped(prepared_runs: dict[str, PreparedRun], tmp_path: Path) -> None:
    data = resolve_dataset(str(_bad_images_folder(tmp_path)), "filename_index")
    rec = evaluate(prepared_runs["onnxruntime"], data)
    by_id = {s.sample_id: s for s in rec.samples}
    assert len(rec.samples) == 7 and rec.counts["failed"] == 3 and rec.counts["evaluated"] == 4
    for bad in ("truncated_243.jpg", "garbage_1.jpg", "empty_2.jpg"):
        assert by_id[bad].error and by_id[bad].topk_indices == []
    for ok in ("good_243.jpg", "gray_243.jpg", "png_named_jpeg_243.jpg", "cmyk_243.jpg"):
        assert by_id[ok].error is None and by_id[ok].top1 == 243, ok
    top1 = rec.metric("top1")
    assert top1 is not None and (top1.successes, top1.n) == (4, 4)
    assert "0x" not in (by_id["garbage_1.jpg"].error or "")  # no object addresses in reasons
    assert evaluate(prepared_runs["onnxruntime"], data).result_hash == rec.result_hash  # stable with failures
    assert "3 samples failed and are not in n" in rec.claims[0].reason


def test_fail_fast_stops(prepared_runs: dict[str, PreparedRun], tmp_path: Path) -> None:
    data = resolve_dataset(str(_bad_images_folder(tmp_path)), "filename_index")
    p = prepared_runs["onnxruntime"]
    with pytest.raises(SampleError, match=r"^sample '.*' failed: .* \(--fail-fast\)$"):
        evaluate(replace(p, settings=replace(p.settings, fail_fast=True)), data)


def test_wrong_checksum_refuses(tmp_path: Path) -> None:
    bad = tmp_path / "lite0.yaml"
    bad.write_text(LITE0.read_text().replace("sha256: 5793", "sha256: 0793"))
    with pytest.raises(ChecksumError):
        prepare(bad, RunSettings(runtime="onnxruntime", threads=1, batch_size=4))


def test_local_onnx_manifest(tmp_path: Path, prepared_runs: dict[str, PreparedRun]) -> None:
    """A manifest whose source is an ONNX file (the export of Lite0) gives the same predictions."""
    runner = prepared_runs["onnxruntime"].runner
    onnx_path = Path(runner.info()["export"]["onnx_path"])
    shutil.copy(onnx_path, tmp_path / "lite0.onnx")
    import hashlib

    sha = hashlib.sha256((tmp_path / "lite0.onnx").read_bytes()).hexdigest()
    text = LITE0.read_text()
    start, end = text.index("framework:"), text.index("inputs:")
    onnx_manifest = (
        text[:start] + f"framework:\n  name: onnx\n  version: '>=1.14'\n\nsource:\n  uri: lite0.onnx\n"
        f"  sha256: {sha}\n  format: onnx\n\n" + text[end:]
    )
    (tmp_path / "lite0-onnx.yaml").write_text(onnx_manifest)
    rec = evaluate(
        prepare(tmp_path / "lite0-onnx.yaml", RunSettings(runtime="onnxruntime", threads=2, batch_size=10)),
        resolve_dataset("foolbox_imagenet"),
    )
    assert [s.top1 for s in rec.samples] == LITE0_FOOLBOX_TOP1


LITE12_TOP1 = [243, 559, 438, 990, 949, 853, 609, 511, 915, 455, 541, 630, 741, 471, 127, 99, 251, 22, 317, 305]


@pytest.mark.parametrize("size", [1, 2])
def test_lite1_and_lite2_examples_run(size: int) -> None:
    from tests.conftest import EXAMPLES

    rec = evaluate(
        prepare(EXAMPLES / f"efficientnet-lite{size}.yaml", RunSettings(runtime="torch", threads=1, batch_size=10)),
        resolve_dataset("foolbox_imagenet"),
    )
    top1, top5 = rec.metric("top1"), rec.metric("top5")
    assert top1 is not None and top5 is not None and (top1.successes, top5.successes) == (18, 20)
    assert [s.top1 for s in rec.samples] == LITE12_TOP1
    assert rec.pipeline["preprocess"][1]["size"] == {1: 272, 2: 292}[size]

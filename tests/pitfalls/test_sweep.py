"""The whole sweep on the 20 foolbox images: exact counts, shared decoding, records, store, no labels."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
from PIL import Image

from repliscope.datasets import resolve_dataset
from repliscope.evaluation.run import PreparedRun, RunSettings, prepare
from repliscope.ops import decode as decode_module
from repliscope.pitfalls.sweep import SweepOutput, run_sweep
from repliscope.store.repository import RunStore
from tests.conftest import LITE0

# top-1 successes of 20 and flips against the reference, measured once (onnxruntime, Lite0)
EXPECTED = {
    "batch_size_1": (18, 0),
    "center_crop_offset": (18, 2),
    "color_layout_swapped": (15, 5),
    "crop_fraction_1.0": (17, 3),
    "data_layout_reshape": (0, 20),
    "decoder_swapped": (18, 0),
    "float16_inference": (18, 0),
    "no_center_crop": (17, 3),
    "no_normalization": (1, 19),
    "normalize_before_cast": (13, 7),
    "resize_antialias_toggled": (18, 0),
    "resize_bilinear": (17, 1),
    "resize_library_swapped": (18, 0),
    "resize_nearest": (18, 1),
    "threads_changed": (18, 0),
    "torchvision_mean_std": (15, 3),
}

NOT_APPLICABLE = {
    "bfloat16_inference": "bfloat16 inference is implemented for torch, not onnxruntime",
    "bfloat16_normalization": "bfloat16 layers are implemented for torch, not onnxruntime",
    # the ONNX export folds Lite0's batch norms into its convolutions
    "float16_normalization": "the ONNX model has no normalisation node (folded into the convolutions): nothing to "
    "run in float16",
}


@pytest.fixture(scope="module")
def prepared() -> PreparedRun:
    return prepare(LITE0, RunSettings(runtime="onnxruntime", threads=2, batch_size=8))


@pytest.fixture(scope="module")
def sweep(prepared: PreparedRun) -> SweepOutput:
    return run_sweep(prepared, resolve_dataset("foolbox_imagenet"))


def test_exact_counts(sweep: SweepOutput) -> None:
    r = sweep.result
    ref = r.reference.metric("top1")
    assert ref is not None and (ref.successes, ref.n) == (18, 20)
    got = {}
    for v in r.variants:
        if v.name in NOT_APPLICABLE:
            assert (v.status, v.reason) == ("not applicable", NOT_APPLICABLE[v.name])
            continue
        assert v.status == "ok", (v.name, v.reason)
        t1 = v.metric("top1")
        assert t1 is not None and v.paired is not None
        got[v.name] = (t1.successes, v.paired.flipped)
    assert got == EXPECTED


def test_paired_statistics(sweep: SweepOutput) -> None:
    r = sweep.result
    swap = r.outcome("color_layout_swapped").paired
    assert swap is not None and swap.n == 20 and swap.agreement == 0.75 and swap.delta_top1 == -0.15
    assert swap.b is not None and swap.c is not None and swap.b - swap.c == 3
    reshape = r.outcome("data_layout_reshape").paired
    assert reshape is not None and reshape.b == 18 and reshape.c == 0
    assert reshape.mcnemar_p == pytest.approx(2 * 0.5**18)  # exact two-sided binomial
    assert reshape.mean_kl > 1.0
    same = r.outcome("threads_changed").paired
    assert same is not None and same.mcnemar_p == 1.0 and same.mean_kl < 1e-6


def test_records_linked_and_stored(sweep: SweepOutput, tmp_path: Path) -> None:
    r = sweep.result
    assert len(sweep.records) == 17
    assert {rec.variant for rec in sweep.records} == {"reference", *EXPECTED}
    assert all(rec.sweep_id == r.sweep_id and rec.kind == "pitfall_variant" for rec in sweep.records)
    by_variant = {rec.variant: rec for rec in sweep.records}
    assert by_variant["color_layout_swapped"].pipeline["preprocess"][0]["channels"] == "BGR"
    assert by_variant["batch_size_1"].options["batch_size"] == 1
    assert by_variant["threads_changed"].runtime["threads"] == 1
    store = RunStore(f"sqlite:///{tmp_path / 'r.db'}")
    for rec in sweep.records:
        store.save(rec)
    store.save_sweep(r)
    assert store.get_sweep(r.sweep_id[:8]) == r
    assert len(store.list(sweep_id=r.sweep_id)) == 17


def test_visual_panels(sweep: SweepOutput) -> None:
    panels = sweep.result.visual
    assert len(panels) == 3 and all(len(p.entries) == 17 for p in panels)
    for entry in panels[0].entries:
        img = Image.open(io.BytesIO(base64.b64decode(entry.image_png)))
        assert img.size == (224, 224)
        if entry.variant in ("reference", "threads_changed", "batch_size_1", "float16_inference"):
            assert not entry.max_abs_diff
        else:
            assert entry.diff_png is not None and entry.max_abs_diff is not None
    swap = next(e for e in panels[0].entries if e.variant == "color_layout_swapped")
    assert swap.max_abs_diff is not None and swap.max_abs_diff > 0.5


def test_decode_is_shared(prepared: PreparedRun, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    original = decode_module.Decode.__call__

    def counting(self, item):  # type: ignore[no-untyped-def]
        calls.append(self.params.library)
        return original(self, item)

    monkeypatch.setattr(decode_module.Decode, "__call__", counting)
    data = resolve_dataset("foolbox_imagenet", limit=5)
    run_sweep(prepared, data, ["color_layout_swapped", "resize_bilinear", "no_normalization", "decoder_swapped"])
    # reference, resize_bilinear and no_normalization share one pillow RGB decode; the swapped decode and the
    # opencv decode are one each: 3 decodes per image instead of 5
    assert len(calls) == 5 * 3 and calls.count("opencv") == 5


def test_without_labels(prepared: PreparedRun, tmp_path: Path) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    for smp in resolve_dataset("foolbox_imagenet", limit=4).samples:
        (folder / smp.id).write_bytes(smp.read())
    data = resolve_dataset(str(folder), "none")
    out = run_sweep(prepared, data, ["color_layout_swapped", "data_layout_reshape"], visual_samples=1)
    v = out.result.outcome("data_layout_reshape")
    assert v.metrics == [] and v.paired is not None and v.paired.mcnemar_p is None
    assert v.paired.n == 4 and v.paired.flipped == 4 and v.paired.mean_kl > 1.0


def test_unknown_variant_is_an_error(prepared: PreparedRun) -> None:
    from repliscope.pitfalls.degrees import VariantSpecError

    with pytest.raises(
        VariantSpecError, match=r"unknown pitfall 'colour_layout_swapped'\. Did you mean 'color_layout_swapped'"
    ):
        run_sweep(prepared, resolve_dataset("foolbox_imagenet", limit=2), ["colour_layout_swapped"])


def test_identical_inputs_reuse_outputs(sweep: SweepOutput) -> None:
    """Pillow and OpenCV decode these JPEGs bit-identically (both libjpeg-turbo): the decoder variant's model
    inputs equal the reference's in every batch, so its outputs are reused, and its predictions are the same."""
    r = sweep.result
    assert r.outcome("decoder_swapped").inference_reused == {"reference": 3}
    # the reused batches cost what the reference measured on the same runner and inputs
    assert r.outcome("decoder_swapped").inference_seconds == r.reference.inference_seconds > 0.0
    assert r.outcome("color_layout_swapped").inference_reused == {}
    # a different runner (other thread count) never reuses, even with identical inputs
    assert r.outcome("threads_changed").inference_reused == {}
    assert r.outcome("batch_size_1").inference_reused == {}


def test_every_variant_has_its_own_timings(sweep: SweepOutput) -> None:
    """Issue 21 item 2: not one shared loop time and throughput 0.0 for every variant; each record's loop time is
    its own model time (batch latencies; a reused batch counts the twin's), its throughput evaluated / that."""
    records = {rec.variant: rec for rec in sweep.records}
    assert len(records) == len(sweep.records) == 1 + sum(v.status == "ok" for v in sweep.result.variants)
    for name, rec in records.items():
        t = rec.timings
        assert t.batch_latencies_seconds, name
        assert t.loop_seconds == t.inference_seconds == sum(t.batch_latencies_seconds) > 0.0, name
        assert t.throughput_samples_per_second == rec.counts["evaluated"] / t.loop_seconds > 0.0, name
        assert t.total_seconds == t.load_seconds + t.warmup_seconds + t.loop_seconds, name
    assert len(records["batch_size_1"].timings.batch_latencies_seconds) == 20  # 20 samples, one per batch
    assert len(records["reference"].timings.batch_latencies_seconds) == 3
    assert (
        records["decoder_swapped"].timings.batch_latencies_seconds
        == records["reference"].timings.batch_latencies_seconds
    )
    assert (
        len({rec.timings.loop_seconds for name, rec in records.items() if name != "decoder_swapped"})
        == len(records) - 1
    )  # measured separately
    shared = sweep.result.timings
    reused = {v.name for v in sweep.result.variants if v.inference_reused}
    own = sum((rec.timings.inference_seconds for name, rec in records.items() if name not in reused), 0.0)
    # the sweep's model time counts a reused batch once
    assert own <= shared["inference_seconds"] < sum(rec.timings.inference_seconds for rec in records.values())
    assert shared["loop_seconds"] >= shared["inference_seconds"]


def test_a_variant_that_cannot_run_is_failed_not_fatal(tmp_path: Path) -> None:
    """torchvision-style constants (scale 1/255, std < 1): moving the cast after them cannot run on uint8
    (std truncates to 0). That variant is reported 'failed' with the reason; the others still run."""
    text = LITE0.read_text().replace(
        "  - op: subtract_mean\n    value: 127.0\n  - op: divide_std\n    value: 128.0\n",
        "  - op: scale\n    factor: 0.00392156862745098\n  - op: subtract_mean\n    value: [0.485, 0.456, 0.406]\n"
        "  - op: divide_std\n    value: [0.229, 0.224, 0.225]\n",
    )
    path = tmp_path / "tv.yaml"
    path.write_text(text)
    p = prepare(path, RunSettings(runtime="onnxruntime", threads=2, batch_size=4))
    out = run_sweep(
        p,
        resolve_dataset("foolbox_imagenet", limit=4),
        ["normalize_before_cast", "color_layout_swapped"],
        visual_samples=1,
    )
    failed = out.result.outcome("normalize_before_cast")
    assert failed.status == "failed" and failed.reason is not None and "divide_std" in failed.reason
    assert out.result.outcome("color_layout_swapped").status == "ok"
    assert {rec.variant for rec in out.records} == {"reference", "color_layout_swapped"}


def test_labels_outside_the_model_are_refused(prepared: PreparedRun, tmp_path: Path) -> None:
    from repliscope.errors import DatasetError

    folder = tmp_path / "odd"
    folder.mkdir()
    smp = resolve_dataset("foolbox_imagenet", limit=1).samples[0]
    (folder / "dog_5000.jpg").write_bytes(smp.read())
    with pytest.raises(DatasetError, match=r"dog_5000.jpg \(label 5000\)"):
        run_sweep(prepared, resolve_dataset(str(folder), "filename_index"), ["color_layout_swapped"])


def test_data_parallel_sweep_matches_the_pipelined_one(prepared: PreparedRun, sweep: SweepOutput) -> None:
    """The same exact counts and the same per-sample predictions when every worker runs whole batches for every
    variant with runner replicas of its own (the schedule the calibration usually picks on 2 cores)."""
    from dataclasses import replace

    dp = replace(
        prepared, settings=RunSettings(runtime="onnxruntime", threads=1, batch_size=3, schedule="data_parallel")
    )
    out = run_sweep(dp, resolve_dataset("foolbox_imagenet"), visual_samples=2)
    assert out.result.options["schedule"] == "data_parallel" and out.result.options["batch_size"] == 3
    got = {
        v.name: (v.metric("top1").successes, v.paired.flipped)
        for v in out.result.variants  # type: ignore[union-attr]
        if v.status == "ok"
    }
    assert got == EXPECTED
    top1 = {r.variant: [s.top1 for s in r.samples] for r in sweep.records}
    assert {r.variant: [s.top1 for s in r.samples] for r in out.records} == top1
    assert out.records[0].dataset["identity"] == sweep.records[0].dataset["identity"]
    assert len(out.result.visual) == 2


def test_torch_sweep_with_other_thread_counts_runs_pipelined() -> None:
    """torch's thread count is process-global: a thread-count variant cannot run beside the reference in
    parallel workers, so such a sweep runs pipelined, and says why."""
    torch_run = prepare(LITE0, RunSettings(runtime="torch", threads=1, batch_size=2, schedule="data_parallel"))
    data = resolve_dataset("foolbox_imagenet", limit=4)
    out = run_sweep(torch_run, data, ["threads_changed"], visual_samples=0)
    plan = out.result.options["plan"]
    assert out.result.options["schedule"] == "pipelined" and plan["schedule"] == "pipelined"
    assert "torch's thread count is process-global" in plan["source"]
    assert out.result.outcome("threads_changed").settings == {"threads": 2}
    assert [s.top1 for s in out.records[0].samples] == [s.top1 for s in out.records[1].samples] == [243, 559, 438, 990]

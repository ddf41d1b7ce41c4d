"""The sweep at a named degree (issue 35 follow-up): ``--variant`` takes a variant in the notation the pipeline diff
prints (``center_crop_offset[offset=[1, 0]]``), parsed strictly; the sweep runs exactly that degree; the outcome,
the record and the reports carry it; ``--list`` shows each variant's parameters, allowed degrees and default."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.datasets import resolve_dataset
from repliscope.diff.pipeline.driver import preprocess_pipeline
from repliscope.evaluation.run import PreparedRun, RunSettings, prepare
from repliscope.job_execution import JobSpec, execute_job
from repliscope.manifest.loader import load_manifest
from repliscope.ops.pipeline import Pipeline
from repliscope.pitfalls.base import PITFALLS, PitfallContext, label
from repliscope.pitfalls.degrees import (
    VariantSpec,
    VariantSpecError,
    parse_variant,
    parse_variants,
    pitfall_listing,
    resolve_variant,
)
from repliscope.pitfalls.sweep import SweepOutput, run_sweep, task_pitfalls
from tests.conftest import EXAMPLES, LITE0

CTX = PitfallContext(input_shape=(-1, 3, 224, 224), input_layout="NCHW", runtime="onnxruntime", batch_size=8, threads=2)
YOLO_CTX = PitfallContext((-1, 3, 416, 416), "NCHW", "onnxruntime", 1, 1)
cli = CliRunner(env={"COLUMNS": "200"})
# the run's plan given (no calibration: the tests measure what the sweep does, not how it uses the cores)
GIVEN = ["pitfalls", str(LITE0), "--runtime", "onnxruntime", "--threads", "2", "--batch-size", "8"]
GIVEN += ["--schedule", "pipelined"]

# the degrees a user copies from a pipeline diff, and what Lite0 does with them on the first 8 foolbox images
# (onnxruntime, batch 8; measured once): top-1 successes of 8, flips against the reference (6 of 8)
DEGREES = [
    "center_crop_offset[offset=[1,0]]",  # as typed; stored as the diff prints it: [1, 0]
    "center_crop_offset",  # the default degree, [1, 1]
    "normalize_before_cast[steps=1]",
    "resize_library_swapped[library=torch]",
]
EXPECTED = {
    "center_crop_offset": ({}, 7, 1, "center_crop window moved +1 rows, +1 columns"),
    "center_crop_offset[offset=[1, 0]]": ({"offset": [1, 0]}, 6, 0, "center_crop window moved +1 rows, +0 columns"),
    "normalize_before_cast[steps=1]": (
        {"steps": 1},
        2,
        4,
        "to_float moved after subtract_mean (uint8 arithmetic, wrapping); divide_std stays in float",
    ),
    "resize_library_swapped[library=torch]": (
        {"library": "torch"},
        6,
        0,
        "resize.library pillow -> torch (antialias True -> False)",
    ),
}


@pytest.fixture(scope="module")
def prepared() -> PreparedRun:
    return prepare(LITE0, RunSettings(runtime="onnxruntime", threads=2, batch_size=8, schedule="pipelined"))


@pytest.fixture(scope="module")
def sweep(prepared: PreparedRun) -> SweepOutput:
    return run_sweep(prepared, resolve_dataset("foolbox_imagenet", limit=8), DEGREES, visual_samples=0)


@pytest.fixture(scope="module")
def lite0() -> Pipeline:
    return preprocess_pipeline(load_manifest(LITE0))


@pytest.fixture(scope="module")
def yolo() -> Pipeline:
    task_pitfalls("object_detection")  # registers the detection and YOLO variants
    return preprocess_pipeline(load_manifest(EXAMPLES / "yolov3-tiny.yaml"))


def test_every_degree_the_diff_prints_parses_back_to_itself(lite0: Pipeline, yolo: Pipeline) -> None:
    """What the diagnosis names (:func:`label` of every degree of every variant with parameters, on Lite0 and on
    YOLOv3-tiny) is accepted by ``--variant`` as it is printed, and names the same degree."""
    seen = 0
    for base, ctx in ((lite0, CTX), (yolo, YOLO_CTX)):
        for name in PITFALLS.names():
            cls = PITFALLS.get(name)
            for params in cls().degrees(base, ctx) if cls.parameters else []:
                printed = label(name, params)
                spec = resolve_variant(parse_variant(printed), base, ctx)
                assert (spec.pitfall, spec.params, spec.label) == (name, params, printed)
                seen += 1
    # Lite0: 24 offsets, 2 steps, 3 libraries; YOLOv3-tiny: 24 offsets (no crop: not applicable), 5 greys (its
    # own 0.5 left out), 1 step, 4 libraries (its own darknet left out)
    assert seen == (24 + 2 + 3) + (24 + 5 + 1 + 4)
    fill = resolve_variant(parse_variant("letterbox_fill[fill=0.447059]"), yolo, YOLO_CTX)
    assert fill.params == {"fill": 114 / 255}  # the printed 6 digits name the exact grey the diff tried
    assert parse_variant(" resize_library_swapped[ library = opencv ] ") == VariantSpec(
        "resize_library_swapped", {"library": "opencv"}
    )
    assert parse_variant("crop_fraction_1.0") == VariantSpec("crop_fraction_1.0", {})


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            "centre_crop_offset[offset=[1, 0]]",
            r"variant 'centre_crop_offset\[offset=\[1, 0\]\]': unknown pitfall 'centre_crop_offset'\. Did you mean "
            r"'center_crop_offset'.*\(allowed: batch_size_1, .*center_crop_offset, ",
        ),
        ("center_crop_offset[shift=1]", r"no parameter 'shift' \(center_crop_offset's parameters: offset\)$"),
        ("color_layout_swapped[steps=1]", r"no parameter 'steps' \(color_layout_swapped's parameters: none\)$"),
        ("center_crop_offset[offset=[1, 0]", r"unbalanced '\[' \(NAME or NAME\[PARAMETER=VALUE, \.\.\.\]"),
        ("center_crop_offset[offset]", r"'offset' is not PARAMETER=VALUE \(center_crop_offset's parameters: offset\)"),
        ("center_crop_offset[]", r"empty brackets \(center_crop_offset's parameters: offset; or the bare name"),
        ("normalize_before_cast[steps=1, steps=2]", r"parameter 'steps' given twice$"),
        ("normalize_before_cast[steps=true]", r"steps='true': a number, a word or a list of them"),
        ('center_crop_offset[offset={"a": 1}]', r"a number, a word or a list of them"),
    ],
)
def test_a_wrong_name_or_parameter_is_one_error_naming_the_allowed_ones(given: str, message: str) -> None:
    with pytest.raises(VariantSpecError, match=message):
        parse_variant(given)


def test_a_hostile_value_is_refused_by_name_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    with pytest.raises(
        VariantSpecError,
        match=rf"library='\$\(touch {marker}\)' is neither a number, a list such as \[1, 0\] nor a word$",
    ):
        parse_variant(f"resize_library_swapped[library=$(touch {marker})]")
    with pytest.raises(VariantSpecError, match=r"library='opencv; touch .*' is neither a number"):
        parse_variant(f"resize_library_swapped[library=opencv; touch {marker}]")
    assert not marker.exists()


def test_a_value_outside_the_degrees_names_the_allowed_ones(lite0: Pipeline, yolo: Pipeline) -> None:
    """Checked on the manifest's pipeline: a degree the diagnosis could not name is refused with the ones it can."""
    with pytest.raises(
        VariantSpecError,
        match=r"^variant 'center_crop_offset\[offset=\[3, 0\]\]': offset=\[3, 0\] is not a degree of "
        r"center_crop_offset on this manifest's pipeline \(allowed offset: \[-2, -2\], \[-2, -1\], .*\[2, 2\]\)$",
    ):
        resolve_variant(parse_variant("center_crop_offset[offset=[3,0]]"), lite0, CTX)
    with pytest.raises(VariantSpecError, match=r"library=pillow is not a degree .*\(allowed library: opencv, torch, "):
        resolve_variant(parse_variant("resize_library_swapped[library=pillow]"), lite0, CTX)  # Lite0's own
    with pytest.raises(VariantSpecError, match=r"steps=4 is not .*\(allowed steps: 1, 2\)$"):
        resolve_variant(parse_variant("normalize_before_cast[steps=4]"), lite0, CTX)
    with pytest.raises(VariantSpecError, match=r"fill=0.3 is not .*\(allowed fill: 0, 0.447059, 0.498039, 0.501961, "):
        resolve_variant(parse_variant("letterbox_fill[fill=0.3]"), yolo, YOLO_CTX)


def test_duplicates_run_once_and_every_refusal_is_in_one_error(prepared: PreparedRun, tmp_path: Path) -> None:
    assert [
        s.label for s in parse_variants(["center_crop_offset[offset=[1,0]]", "center_crop_offset[offset=[1, 0]]"])
    ] == ["center_crop_offset[offset=[1, 0]]"]
    with pytest.raises(VariantSpecError) as caught:
        run_sweep(
            prepared,
            resolve_dataset("foolbox_imagenet", limit=2),
            ["colour_layout_swapped", "normalize_before_cast[steps=9]", "color_layout_swapped"],
        )
    message = str(caught.value)
    assert message.startswith("variant 'colour_layout_swapped': unknown pitfall 'colour_layout_swapped'.")
    assert message.endswith(
        "; variant 'normalize_before_cast[steps=9]': steps=9 is not a degree of normalize_before_cast on this "
        "manifest's pipeline (allowed steps: 1, 2)"
    )


def test_the_sweep_runs_exactly_the_named_degree(sweep: SweepOutput) -> None:
    r = sweep.result
    ref = r.reference.metric("top1")
    assert ref is not None and (ref.successes, ref.n) == (6, 8) and r.reference.pitfall is None
    got = {}
    for v in r.variants:
        t1 = v.metric("top1")
        assert v.status == "ok" and t1 is not None and v.paired is not None
        assert v.pitfall == v.name.split("[")[0]
        got[v.name] = (v.params, t1.successes, v.paired.flipped, v.change)
    assert got == EXPECTED
    # the degree the diff named moves no prediction where the default degree moves one: measure the one named
    assert r.options["variants_requested"] == [
        "center_crop_offset[offset=[1, 0]]",
        "center_crop_offset",
        "normalize_before_cast[steps=1]",
        "resize_library_swapped[library=torch]",
    ]
    offset = r.outcome("center_crop_offset[offset=[1, 0]]").pipeline or {}
    assert [op["offset"] for op in offset["preprocess"] if op["op"] == "center_crop"] == [[1, 0]]


def test_the_records_store_the_degree(sweep: SweepOutput) -> None:
    variants = {rec.variant: rec for rec in sweep.records}
    assert set(variants) == {"reference", *EXPECTED}
    crop = [
        op for op in variants["center_crop_offset[offset=[1, 0]]"].pipeline["preprocess"] if op["op"] == "center_crop"
    ]
    assert crop[0]["offset"] == [1, 0]
    assert all(rec.sweep_id == sweep.result.sweep_id for rec in sweep.records)


def test_a_degree_the_pipeline_does_not_have_is_not_applicable_with_the_reason(prepared: PreparedRun) -> None:
    out = run_sweep(
        prepared, resolve_dataset("foolbox_imagenet", limit=1), ["letterbox_fill[fill=0]"], visual_samples=0
    )
    [v] = out.result.variants
    assert (v.name, v.pitfall, v.params, v.status) == (
        "letterbox_fill[fill=0]",
        "letterbox_fill",
        {"fill": 0},
        "not applicable",
    )
    assert v.reason == "the pipeline has no 'darknet_letterbox' or 'letterbox' op"


def test_cli_sweep_at_a_degree_stored_and_reported(tmp_path: Path) -> None:
    """End to end: the CLI sweep at the degree, its JSON, the terminal table (the degree is text, not rich
    markup), the stored runs and the HTML report all name it."""
    args = [*GIVEN, "--limit", "2", "--visual", "0"]
    res = cli.invoke(app, [*args, "--variant", "resize_library_swapped[library=opencv]", "--json"])
    assert res.exit_code == 0, res.output
    sweep = json.loads(res.output)
    [v] = sweep["variants"]
    assert (v["name"], v["pitfall"], v["params"]) == (
        "resize_library_swapped[library=opencv]",
        "resize_library_swapped",
        {"library": "opencv"},
    )
    res = cli.invoke(app, ["runs", "list", "--sweep", sweep["sweep_id"][:8], "--json"])
    assert sorted(r["variant"] for r in json.loads(res.output)) == [
        "reference",
        "resize_library_swapped[library=opencv]",
    ]
    out = tmp_path / "sweep.html"
    res = cli.invoke(app, ["report", sweep["sweep_id"][:12], "--format", "html", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "resize_library_swapped[library=opencv]" in out.read_text(encoding="utf-8")

    res = cli.invoke(app, [*args, "--variant", "letterbox_fill[fill=0]"])
    assert res.exit_code == 0, res.output
    assert "letterbox_fill[fill=0]" in res.output  # rich would swallow "[fill=0]" as a style tag
    assert "  letterbox_fill[fill=0]: not applicable: the pipeline has no 'darknet_letterbox' or 'letterbox' op" in (
        res.output
    )


def test_cli_refuses_a_wrong_degree_before_anything_runs() -> None:
    args = [*GIVEN, "--limit", "2", "--json"]
    res = cli.invoke(app, [*args, "--variant", "center_crop_offset[offset=[0, 0]]"])
    assert res.exit_code == 2, res.output
    assert "offset=[0, 0] is not a degree of center_crop_offset on this manifest's pipeline (allowed offset: " in (
        " ".join(res.output.split())
    )
    res = cli.invoke(app, ["runs", "list", "--json"])
    assert json.loads(res.output) == []  # nothing ran, nothing stored


def test_list_shows_parameters_allowed_degrees_and_default() -> None:
    listing = {p["name"]: p for p in pitfall_listing()}
    assert listing["center_crop_offset"]["parameters"] == [
        {
            "name": "offset",
            "description": "[rows, columns], each within +-2",
            "values": "[rows, columns], each from -2 to 2, not [0, 0]",
            "default": "[1, 1]",
        }
    ]
    assert listing["normalize_before_cast"]["degrees"] == (
        "steps: 1 to the number of subtract_mean / divide_std / scale ops directly after the cast (default all of them)"
    )
    assert listing["color_layout_swapped"]["parameters"] == [] and listing["color_layout_swapped"]["degrees"] == ""
    with_params = {n for n, p in listing.items() if p["parameters"]}
    assert with_params == {"center_crop_offset", "normalize_before_cast", "resize_library_swapped", "letterbox_fill"}
    assert all(p["values"] and p["default"] for n in with_params for p in listing[n]["parameters"])

    res = cli.invoke(app, ["pitfalls", "--list", "--json"])
    assert res.exit_code == 0 and json.loads(res.output) == pitfall_listing()
    res = cli.invoke(app, ["pitfalls", "--list"])
    # the brackets are text, not rich markup ("[rows, columns]" would be swallowed as a style tag)
    assert res.exit_code == 0 and "offset: [rows, columns], each from -2 to 2, not [0, 0]" in res.output


def test_a_sweep_job_runs_the_named_degree(tmp_path: Path) -> None:
    """The service's and agents' sweep job (``variants`` in its options) takes the same notation."""
    job = JobSpec(
        "job-degrees",
        "pitfalls",
        "efficientnet-lite0@1.0.0",
        LITE0.read_text(encoding="utf-8"),
        "onnxruntime",
        "foolbox",
        "foolbox_imagenet",
        {
            "manifest_path": str(LITE0),
            "limit": 2,
            "threads": 2,
            "batch_size": 8,
            "schedule": "pipelined",
            "visual": 0,
            "variants": ["center_crop_offset[offset=[-1,2]]"],
        },
    )
    cache = Path(os.environ["REPLISCOPE_CACHE"])  # the session's: Lite0's ONNX export is made once
    outcome = execute_job(job, cache, lambda n: None, lambda line: None)
    [sweep] = outcome.sweeps
    [v] = sweep["variants"]
    assert (v["name"], v["params"], v["change"]) == (
        "center_crop_offset[offset=[-1, 2]]",
        {"offset": [-1, 2]},
        "center_crop window moved -1 rows, +2 columns",
    )
    assert sorted(r["variant"] for r in outcome.records) == ["center_crop_offset[offset=[-1, 2]]", "reference"]
    options = {**job.run_options.model_dump(exclude_defaults=True), "variants": ["center_crop_offset[x=1]"]}
    bad = dataclasses.replace(job, job_id="job-bad", options=options)
    with pytest.raises(VariantSpecError, match=r"no parameter 'x' \(center_crop_offset's parameters: offset\)"):
        execute_job(bad, cache, lambda n: None, lambda line: None)


def test_list_with_a_manifest_shows_the_exact_degrees_there() -> None:
    """``pitfalls MANIFEST --list``: the manifest's task's variants, and for each with parameters the degrees
    ``--variant`` accepts on its pre-processing and the one the bare name runs (the units follow the pipeline)."""
    res = cli.invoke(app, ["pitfalls", str(LITE0), "--list", "--json"])
    assert res.exit_code == 0, res.output
    lite0 = {p["name"]: p.get("on_manifest") for p in json.loads(res.output)}
    assert "letterbox_fill" not in lite0 and "box_off_by_one" not in lite0 and lite0["data_layout_reshape"] is None
    crop = lite0["center_crop_offset"]
    assert crop is not None and len(crop["degrees"]) == 24 and crop["default"] == "center_crop_offset[offset=[1, 1]]"
    assert lite0["normalize_before_cast"] == {
        "degrees": ["normalize_before_cast[steps=1]", "normalize_before_cast[steps=2]"],
        "default": "normalize_before_cast[steps=2]",
        "not_applicable": None,
    }
    assert lite0["resize_library_swapped"]["default"] == "resize_library_swapped[library=opencv]"

    res = cli.invoke(app, ["pitfalls", str(EXAMPLES / "yolov3-tiny.yaml"), "--list", "--json"])
    yolo = {p["name"]: p.get("on_manifest") for p in json.loads(res.output)}
    assert yolo["center_crop_offset"] == {
        "degrees": [],
        "default": None,
        "not_applicable": "the pipeline has no 'center_crop' op",
    }
    assert yolo["letterbox_fill"] == {
        "degrees": [
            "letterbox_fill[fill=0]",
            "letterbox_fill[fill=0.447059]",
            "letterbox_fill[fill=0.498039]",
            "letterbox_fill[fill=0.501961]",
            "letterbox_fill[fill=1]",
        ],
        "default": "letterbox_fill[fill=0]",
        "not_applicable": None,
    }
    res = cli.invoke(app, ["pitfalls", "/no/such.yaml", "--list"])
    assert res.exit_code == 2 and "/no/such.yaml" in res.output

"""``repliscope runs list|show|compare`` on hand-made records: readable at 80 columns, class names, exit codes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.cli.output import console
from repliscope.cli.runs_cmd import runs_layout
from repliscope.store.repository import RunStore
from tests.cli._records import failed, pred, record
from tests.conftest import LITE0


def invoke(*args: str, columns: int = 80) -> tuple[int, str, str]:
    res = CliRunner(env={"COLUMNS": str(columns)}).invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def _store(*records: object) -> list[str]:
    with RunStore(None) as store:
        for r in records:
            store.save(r)  # type: ignore[arg-type]
    return [r.run_id for r in records]  # type: ignore[attr-defined]


def _typical(failure: bool = False) -> list[str]:
    """Four evaluations of today: three models (up to 24 characters with the version), three runtimes, two
    datasets; with ``failure``, one run has a failed sample."""
    t0 = datetime.now(UTC).replace(hour=9, minute=0, second=0, microsecond=0)
    samples = [pred("a.jpg", 1, [1, 2]), pred("b.jpg", 2, [3, 2])]
    return _store(
        record(samples, created=t0, runtime="torch", dataset="foolbox_imagenet"),
        record(samples, created=t0 + timedelta(minutes=5), runtime="onnxruntime", dataset="imagenet-sample"),
        record(
            [*samples, failed("c.jpg", 3)] if failure else samples,
            created=t0 + timedelta(minutes=9),
            runtime="opencv_dnn",
            model="efficientnet-lite2",
        ),
        record(samples, created=t0 + timedelta(minutes=12), model="resnet50-tv", version="2.1.0"),
    )


def test_runs_list_at_80_columns_cuts_nothing_and_keeps_one_line_per_run() -> None:
    ids = _typical()
    code, out, err = invoke("runs", "list")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert "…" not in out and max(len(ln) for ln in lines) <= 80
    assert lines[0] == "4 runs, newest first (local time)"
    # the date is the same for every run: said once; models, runtimes and datasets differ: columns
    local_day = datetime.now(UTC).replace(hour=9, minute=0).astimezone().strftime("%Y-%m-%d")
    assert lines[1] == f"every run: date {local_day}"
    assert lines[2].split() == ["run", "time", "model", "runtime", "dataset", "n", "top-1"]
    rows = lines[4:]
    assert len(rows) == 4  # one line per run, newest first
    assert [r.split()[0] for r in rows] == [i[:8] for i in reversed(ids)]
    assert rows[0].split()[2:] == ["resnet50-tv", "2.1.0", "onnxruntime", "foolbox_imagenet", "2", "50.00", "%"]
    assert rows[1].split()[2:] == ["efficientnet-lite2", "1.0.0", "opencv_dnn", "foolbox_imagenet", "2", "50.00", "%"]
    assert rows[2].split()[2:] == ["efficientnet-lite0", "1.0.0", "onnxruntime", "imagenet-sample", "2", "50.00", "%"]
    assert rows[3].split()[2:] == ["efficientnet-lite0", "1.0.0", "torch", "foolbox_imagenet", "2", "50.00", "%"]
    assert console.width == 80  # the console follows COLUMNS


def test_runs_list_numbers_read_as_on_the_web_pages() -> None:
    """top-1 and AP in ``runs list`` follow the house's rule (tasks.metric_text, as the pages): ``88.90 %`` and
    ``0.3741``, never ``88.9`` or ``0.374``; one run is "1 run"."""
    from repliscope.evaluation.record import MetricValue
    from repliscope.tasks.metric_text import value_text

    samples = [pred("a.jpg", 1, [1, 2])]
    top1 = MetricValue(name="top1", value=0.889, ci_low=0.868, ci_high=0.907, n=1000, successes=889)
    ap = MetricValue(name="AP", value=0.37414, ci_low=0.36, ci_high=0.39, n=500)
    _store(record(samples).model_copy(update={"metrics": [top1]}))
    code, out, _ = invoke("runs", "list")
    lines = out.splitlines()
    assert code == 0 and lines[0] == "1 run, newest first (local time)"
    assert lines[-1].endswith(" 88.90 %") and value_text("top1", 0.889) == "88.90 %"
    _store(record(samples, model="yolo").model_copy(update={"metrics": [ap]}))
    code, out, _ = invoke("runs", "list", columns=200)
    header, rows = out.splitlines()[0], out.splitlines()[3:]
    assert code == 0 and header == "2 runs, newest first (local time; AP: COCO .50:.95)"
    assert rows[0].rstrip().endswith(" 0.3741") and value_text("AP", 0.37414) == "0.3741"
    assert rows[1].rstrip().endswith(" 88.90 %")  # its AP cell is empty


def test_runs_list_failed_column_and_wide_terminal() -> None:
    _typical(failure=True)
    code, out, _ = invoke("runs", "list", columns=200)
    header, *rows = out.splitlines()[1:]
    assert code == 0 and header.split() == [
        "run",
        "date",
        "time",
        "model",
        "runtime",
        "dataset",
        "n",
        "failed",
        "top-1",
    ]
    assert [r.split()[-4:] for r in rows[1:]] == [
        ["2", "0", "50.00", "%"],
        ["3", "1", "50.00", "%"],
        ["2", "0", "50.00", "%"],
        ["2", "0", "50.00", "%"],
    ]
    code, out, _ = invoke("runs", "list")  # 81 characters would be needed: the model names fold, never cut
    assert code == 0 and "…" not in out and max(len(ln) for ln in out.splitlines()) <= 80


def test_runs_list_sweep_runs_show_sweep_and_variant() -> None:
    sweep = "c7de8b39" + "0" * 24
    samples = [pred("a.jpg", 1, [1, 2])]
    _store(
        record(samples, kind="pitfall_variant", sweep_id=sweep, variant="reference"),
        record(samples, kind="pitfall_variant", sweep_id=sweep, variant="color_layout_swapped"),
    )
    code, out, _ = invoke("runs", "list", "--kind", "pitfall_variant")
    lines = out.splitlines()
    assert code == 0 and "…" not in out
    # one model, runtime, dataset and sweep: said once above a table of id, time, n, top-1, variant
    assert lines[1].startswith("every run: date ") and lines[1].endswith("; sweep c7de8b39; runtime onnxruntime")
    assert lines[2] == "           dataset foolbox_imagenet"
    assert lines[3].split() == ["run", "time", "model", "n", "top-1", "variant"]
    assert [ln.split()[-1] for ln in lines[5:]] == ["color_layout_swapped", "reference"]


def test_runs_layout_drops_empty_columns_and_moves_shared_ones_only_when_needed() -> None:
    cells = [
        {
            "run": "abcdef12",
            "date": "2025-01-02",
            "time": "10:00",
            "model": "m 1.0.0",
            "runtime": "torch",
            "dataset": "d",
            "n": "3",
            "failed": "0",
            "top-1": "",
            "sweep": "",
            "variant": "",
        }
    ]
    assert runs_layout(cells, 80) == (["run", "date", "time", "model", "runtime", "dataset", "n"], [], 2)
    # widest of header and cells: 8+10+5+7+7+7+1 = 45 characters; gaps of 2 need 12 more, gaps of 1 need 6
    assert runs_layout(cells, 57)[2] == 2
    assert runs_layout(cells, 56) == (["run", "date", "time", "model", "runtime", "dataset", "n"], [], 1)
    assert runs_layout(cells, 50) == (["run", "time", "model", "runtime", "dataset", "n"], ["date 2025-01-02"], 2)
    # then runtime, dataset and model (the sweep column is empty, so dropped, not moved)
    assert runs_layout(cells, 17) == (
        ["run", "time", "n"],
        ["date 2025-01-02", "runtime torch", "dataset d", "model m 1.0.0"],
        1,
    )


def test_runs_list_unknown_kind_lists_the_kinds() -> None:
    code, out, err = invoke("runs", "list", "--kind", "foo")
    assert code == 2 and out == ""
    assert err == "error: --kind 'foo': unknown run kind (allowed: evaluation, pitfall_variant, benchmark)\n"


def test_runs_list_empty_store() -> None:
    code, out, _ = invoke("runs", "list")
    assert code == 0 and out == "no stored runs\n"


def test_runs_show_samples_names_the_classes() -> None:
    (run_id,) = _store(
        record([pred("imagenet_00_243.jpg", 243, [243, 1]), pred("x.jpg", 559, [436, 559]), failed("bad.jpg", 1)])
    )
    code, out, _ = invoke("runs", "show", run_id[:8], "--samples")
    assert code == 0 and "…" not in out
    rows = {ln.split()[0]: ln.split()[1:] for ln in out.splitlines() if ln.split() and ln.split()[0].endswith(".jpg")}
    assert rows["imagenet_00_243.jpg"] == ["243", "bull_mastiff", "243", "bull_mastiff", "0.5000", "yes"]
    assert rows["x.jpg"] == ["559", "folding_chair", "436", "beach_wagon", "0.5000", "no"]
    assert rows["bad.jpg"] == ["1", "goldfish", "failed"]
    assert "class names not shown" not in out


def test_runs_show_samples_label_file_beside_the_manifest(tmp_path: Path) -> None:
    text = LITE0.read_text().replace(
        "source: builtin:imagenet-1k\n  num_classes: 1000", "source: classes.txt\n  num_classes: 3"
    )
    (tmp_path / "classes.txt").write_text("cat\ndog\nn01\tbird\n")
    manifest = tmp_path / "m.yaml"
    (run_id,) = _store(record([pred("s1.png", 2, [2, 0])], manifest_path=str(manifest), manifest_text=text))
    code, out, _ = invoke("runs", "show", run_id, "--samples")
    assert code == 0 and "2 bird" in out
    (tmp_path / "classes.txt").unlink()  # the label file moved: indices only, and why
    code, out, _ = invoke("runs", "show", run_id, "--samples", columns=400)
    row = next(ln for ln in out.splitlines() if ln.startswith("s1.png"))
    assert code == 0 and row.split() == ["s1.png", "2", "2", "0.5000", "yes"]
    assert "class names not shown: " in out and "classes.txt" in out


def test_runs_compare_without_shared_samples_exits_1() -> None:
    a, b = _store(record([pred("a.jpg", 1, [1])]), record([pred("z.jpg", 1, [1])], dataset="other"))
    code, out, err = invoke("runs", "compare", a, b)
    assert code == 1
    assert err == (
        f"error: runs {a[:8]} and {b[:8]} have no sample that both evaluated (0 shared sample ids, 1 only "
        "in A, 1 only in B): nothing to compare\n"
    )
    assert "common samples 0, evaluated by both 0" in out
    code, out, _ = invoke("runs", "compare", a, b, "--json")
    assert code == 1 and json.loads(out)["comparable"] is False


@pytest.mark.parametrize("shared_failed", [True, False])
def test_runs_compare_all_shared_samples_failed_in_one(shared_failed: bool) -> None:
    a_samples = [pred("a.jpg", 1, [1]), pred("b.jpg", 2, [2])]
    b_samples = (
        [failed("a.jpg", 1), failed("b.jpg", 2)] if shared_failed else [failed("a.jpg", 1), pred("b.jpg", 2, [2])]
    )
    a, b = _store(record(a_samples), record(b_samples, runtime="torch"))
    code, _, err = invoke("runs", "compare", a, b)
    if shared_failed:
        assert code == 1 and "(2 shared sample ids, 0 only in A, 0 only in B): nothing to compare" in err
    else:
        assert code == 0 and err == ""


def test_runs_compare_and_show_write_the_house_numbers() -> None:
    """A percent metric, its interval and a difference as every page writes them (repliscope.number_text):
    ``50.00 %``, ``[0.00, 100.00] %``, ``-50.00 pp``."""
    a, b = _store(
        record([pred("a.jpg", 1, [1, 2]), pred("b.jpg", 2, [2, 3])]),
        record([pred("a.jpg", 1, [1, 2]), pred("b.jpg", 2, [3, 2])], runtime="torch"),
    )
    code, out, _ = invoke("runs", "compare", a, b, columns=200)
    row = next(ln for ln in out.splitlines() if "top1" in ln)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert code == 0 and cells == [
        "top1",
        "100.00 %",
        "50.00 %",
        "-50.00 pp",
        "-50.00 pp (n = 2)",
        "[0.00, 100.00] %",
        "[0.00, 100.00] %",
    ]
    code, out, _ = invoke("runs", "show", a, columns=200)
    row = next(ln for ln in out.splitlines() if "top1" in ln)
    assert code == 0 and [c.strip() for c in row.strip("│ ").split("│")] == [
        "top1",
        "100.00 %",
        "[0.00, 100.00] %",
        "2/2",
    ]


def test_pack_never_splits_a_part() -> None:
    from repliscope.cli.runs_cmd import pack

    assert pack(["a 1", "bb 2", "ccc 3"], 16, "all: ", "     ") == ["all: a 1; bb 2", "     ccc 3"]
    assert pack(["a-very-long-part"], 5, "> ", "  ") == ["> a-very-long-part"]
    assert pack([], 80, "x", "y") == []

"""``repliscope runs chart``: the same chart data and SVG as the web UI's /charts and /sweeps/{id}/parallel, written
to a file (issue 36 item 8); bad options named with the allowed values, nothing written."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.store.repository import RunStore

NS = {"s": "http://www.w3.org/2000/svg"}


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.report.factories import sweep_records
    from tests.report.test_run_charts import parameter_sweep
    from tests.store.chart_runs import seed

    url = f"sqlite:///{tmp_path_factory.mktemp('chart-cli') / 'runs.db'}"
    store = RunStore(url)
    seed(store)
    store.save_sweep(parameter_sweep())
    for r in sweep_records().values():
        store.save(r)
    return url


def invoke(*args: str) -> tuple[int, str, str]:
    res = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["runs", "chart", *args])
    return res.exit_code, res.stdout, res.stderr


def test_the_chart_file_is_the_pages_chart(db: str, tmp_path: Path) -> None:
    from tests.store.chart_runs import MODEL

    out = tmp_path / "chart.svg"
    code, stdout, stderr = invoke(
        "--metric", "top1", "--by", "framework_version", "--model", MODEL, "--out", str(out), "--db", db
    )
    assert code == 0, stderr
    assert f"wrote {out}: top1 by framework version: 6 runs in 3 groups" in stdout
    svg = ET.parse(out).getroot()
    assert svg.find("s:title", NS).text == "top1 by framework version: 6 runs"  # type: ignore[union-attr]
    assert len(svg.findall(".//s:g[@class='point']", NS)) == 6 and svg.findall(".//s:a", NS) == []  # a file: no links
    newest = tmp_path / "newest.svg"
    code, stdout, _ = invoke("--by", "runtime", "--limit", "2", "--out", str(newest), "--db", db)
    assert code == 0 and "the newest 2 of 10 matching runs" in stdout


def test_a_sweeps_parallel_coordinates(db: str, tmp_path: Path) -> None:
    from tests.report.factories import SWEEP_ID

    out = tmp_path / "pc.svg"
    code, stdout, stderr = invoke("--parallel", SWEEP_ID[:12], "--out", str(out), "--db", db)
    assert code == 0, stderr
    assert f"the parallel coordinates of sweep {SWEEP_ID[:12]}, 4 runs, axes variant, scale, offset, top1" in stdout
    assert len(ET.parse(out).getroot().findall(".//s:polyline[@class='pc-path']", NS)) == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--metric", "accuracy"), "unknown metric 'accuracy' (allowed: top1, top5, AP,"),
        (("--by", "colour"), "unknown grouping 'colour' (allowed: runtime, stack, framework_version, variant,"),
        (("--parallel", "5e2f0c1d9a8b", "--metric", "AP"), "(allowed: top1, top5)"),
        (("--parallel", "5e2f0c1d9a8b", "--by", "model"), "--parallel draws one sweep's runs"),
    ],
)
def test_bad_options_are_named_and_nothing_is_written(
    db: str, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    out = tmp_path / "bad.svg"
    code, _stdout, stderr = invoke(*args, "--out", str(out), "--db", db)
    assert code == 2 and message in stderr and not out.exists()


def test_the_out_file_must_be_an_svg_in_an_existing_folder(db: str, tmp_path: Path) -> None:
    code, _, stderr = invoke("--out", str(tmp_path / "no" / "such" / "c.svg"), "--db", db)
    assert code == 2 and "does not exist" in stderr
    code, _, stderr = invoke("--out", str(tmp_path / "c.png"), "--db", db)
    assert code == 2 and "name it *.svg" in stderr and not (tmp_path / "c.png").exists()
    code, _, stderr = invoke("--limit", "501", "--out", str(tmp_path / "c.svg"), "--db", db)
    assert code == 2 and "--limit" in stderr

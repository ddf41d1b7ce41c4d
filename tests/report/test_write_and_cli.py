"""``write_report`` and ``repliscope report`` (typer CliRunner on a tiny app with only that command)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from repliscope.errors import RepliscopeError
from repliscope.evaluation.record import EvaluationRecord
from repliscope.pitfalls.result import SweepResult
from repliscope.report import write_report
from repliscope.store.repository import RunStore
from tests.report import factories
from tests.report.htmlparse import parse
from tests.report.images import decode_data_uri

runner = CliRunner()


def _app() -> typer.Typer:
    from repliscope.cli.report_cmd import register

    app = typer.Typer()
    register(app)

    @app.callback()
    def _root() -> None:  # keep "report" a sub-command even though it is the only one
        """Test app."""

    return app


def _db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/r.db"


def test_write_report_html_and_md(run_record: EvaluationRecord, sweep_result: SweepResult, tmp_path: Path) -> None:
    html = write_report(sweep_result, "html", tmp_path / "deep" / "sweep.html")
    assert html == tmp_path / "deep" / "sweep.html"
    assert "pitfall-table" in parse(html.read_text(encoding="utf-8")).tables
    md = write_report(run_record, "md", tmp_path / "run.md")
    assert md.read_text(encoding="utf-8").startswith("# efficientnet-lite0 1.0.0\n")
    assert not (tmp_path / "run_files").exists()


def test_write_report_md_with_image_files(sweep_result: SweepResult, tmp_path: Path) -> None:
    out = write_report(sweep_result, "md", tmp_path / "sweep.md", images="files")
    text = out.read_text(encoding="utf-8")
    files = sorted((tmp_path / "sweep_files").glob("*.png"))
    assert len(files) == 16
    assert "](sweep_files/deltas.png)" in text and "data:image" not in text


def test_write_report_rejects_unknown_format(run_record: EvaluationRecord, tmp_path: Path) -> None:
    with pytest.raises(RepliscopeError, match="unknown report format 'pdf'"):
        write_report(run_record, "pdf", tmp_path / "x.pdf")


def test_cli_run_report_html(tmp_path: Path) -> None:
    record = factories.record()
    RunStore(_db(tmp_path)).save(record)
    out = tmp_path / "report.html"
    result = runner.invoke(
        _app(), ["report", record.run_id[:8], "--format", "html", "--out", str(out), "--db", _db(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert f"wrote run report {out}" in result.output
    page = parse(out.read_text(encoding="utf-8"))
    assert {"claim", "metrics", "provenance", "latency", "failures"} <= set(page.ids)
    for img in page.images:
        decode_data_uri(img["src"])


def test_cli_run_report_md_default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = factories.record()
    RunStore(_db(tmp_path)).save(record)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(_app(), ["report", record.run_id, "--format", "md", "--db", _db(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / f"repliscope-run-{record.run_id[:12]}.md").is_file()


def test_cli_unknown_id_names_runs_and_sweeps(tmp_path: Path) -> None:
    result = runner.invoke(_app(), ["report", "deadbeef00", "--db", _db(tmp_path)])
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: no run, sweep, benchmark, stack matrix or diff matches 'deadbeef00', in {_db(tmp_path)}; no run stored"
    )
    record = factories.record()
    RunStore(_db(tmp_path)).save(record)
    result = runner.invoke(_app(), ["report", "deadbeef00", "--db", _db(tmp_path)])
    assert result.exit_code == 2 and result.output.strip().endswith(f"; most recent runs: {record.run_id[:12]}")
    result = runner.invoke(_app(), ["report", "dead", "--db", _db(tmp_path)])
    assert result.exit_code == 2 and "(a prefix needs at least 6 characters)" in result.output
    RunStore(_db(tmp_path)).save(factories.record(run_id=record.run_id[:8] + "f" * 24))
    result = runner.invoke(_app(), ["report", record.run_id[:8], "--db", _db(tmp_path)])  # only the run lookup tells
    assert result.exit_code == 2
    assert result.output.startswith(f"error: run id prefix '{record.run_id[:8]}' is ambiguous; candidates: ")


def test_cli_rejects_unknown_format(tmp_path: Path) -> None:
    result = runner.invoke(_app(), ["report", "whatever", "--format", "pdf", "--db", _db(tmp_path)])
    assert result.exit_code == 2 and "unknown report format 'pdf'" in result.output


def test_cli_sweep_report(tmp_path: Path) -> None:
    store = RunStore(_db(tmp_path))
    sweep = factories.sweep()
    for record in factories.sweep_records().values():
        store.save(record)
    store.save_sweep(sweep)
    out = tmp_path / "sweep.html"
    result = runner.invoke(_app(), ["report", sweep.sweep_id[:10], "--out", str(out), "--db", _db(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "wrote sweep report" in result.output
    html = out.read_text(encoding="utf-8")
    page = parse(html)
    assert {"pitfalls", "deltas", "visual"} <= set(page.ids)
    assert len(page.tables["pitfall-table"].rows) == 1 + len(sweep.variants)
    assert "samples whose top-1 changed" in html  # the variants' records were found through the store


def test_importing_repliscope_and_the_report_does_not_import_matplotlib() -> None:
    code = (
        "import sys, repliscope, repliscope.report, repliscope.report.html, repliscope.report.markdown, "
        "repliscope.cli.report_cmd; bad = [m for m in ('matplotlib', 'jinja2') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

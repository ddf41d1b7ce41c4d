"""``runs compare`` and ``report`` run with the cyclic garbage collector paused (:mod:`repliscope.cli.gc_pause`)
and switch it back on afterwards, also when they fail."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from repliscope.cli.gc_pause import gc_paused
from repliscope.cli.main import app
from repliscope.store.repository import RunStore
from tests.cli._records import pred, record


def test_gc_paused_restores_the_previous_state() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="boom"), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # it was off: it stays off
    finally:
        gc.enable()


def _two_runs() -> tuple[str, str]:
    a = record([pred("a.jpg", 1, [1, 2]), pred("b.jpg", 2, [3, 2])], runtime="torch")
    b = record([pred("a.jpg", 1, [1, 2]), pred("b.jpg", 2, [2, 3])], runtime="onnxruntime")
    with RunStore(None) as store:
        store.save(a)
        store.save(b)
    return a.run_id, b.run_id


def test_compare_and_report_run_with_gc_paused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import repliscope.report.write as write
    import repliscope.store.compare as compare

    seen: list[bool] = []
    real_compare, real_write = compare.compare_runs, write.write_report

    def spy_compare(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return real_compare(*args, **kwargs)

    def spy_write(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return real_write(*args, **kwargs)

    monkeypatch.setattr(compare, "compare_runs", spy_compare)
    monkeypatch.setattr(write, "write_report", spy_write)
    a, b = _two_runs()
    res = CliRunner().invoke(app, ["runs", "compare", a[:12], b[:12]])
    assert res.exit_code == 0, res.output
    assert "top-1" in res.stdout
    assert gc.isenabled()
    res = CliRunner().invoke(app, ["report", a[:12], "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r.html").stat().st_size > 1000
    assert seen == [False, False]
    assert gc.isenabled()
    res = CliRunner().invoke(app, ["runs", "compare", "nosuchrun", b[:12]])
    assert res.exit_code == 2
    assert gc.isenabled()

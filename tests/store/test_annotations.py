"""Run annotations (migration 0009, ``repliscope.store.annotations``): tags, notes, display names, the audit of
each change, a deletion that removes the run everywhere and keeps what was deleted in the audit; every bound
refused with the field and the rule named."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, text

from repliscope.store import RunQuery, RunStore
from repliscope.store.annotations import MAX_NOTE_CHARS, MAX_TAGS
from repliscope.store.errors import InvalidInputError, NotFoundError, UnknownIdError
from tests.store.backends import BACKENDS, POSTGRES, wipe
from tests.store.records import TOP1_A, TOP1_B, make_record

A = "a1" + "0" * 30
B = "b2" + "0" * 30


@pytest.fixture(scope="module", params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('annotations') / 'runs.db'}"
        return
    engine = create_engine(str(POSTGRES))
    wipe(engine)
    try:
        yield str(POSTGRES)
    finally:
        wipe(engine)
        engine.dispose()


@pytest.fixture
def store(url: str) -> Iterator[RunStore]:
    """Two runs, no annotations, a fresh audit (the database is made once per module)."""
    with RunStore(url) as s:
        with s.engine.begin() as conn:
            for table in ("run_audit", "run_tags", "run_labels", "sample_predictions", "traces", "runs"):
                conn.execute(text(f"DELETE FROM {table}"))
        s.save(make_record(A, TOP1_A))
        s.save(make_record(B, TOP1_B, runtime="torch"))
        yield s


def test_tags_notes_and_names_with_who_and_when(store: RunStore) -> None:
    notes = store.annotations
    got = notes.add_tags(A[:8], ["baseline", "paper:v2", "baseline"], "alice", "cli")
    assert got.run_id == A
    assert [(t.tag, t.added_by) for t in got.tags] == [("baseline", "alice"), ("paper:v2", "alice")]
    notes.add_tags(A, ["baseline"], "bob", "api")  # already there: no change, no audit entry
    notes.set_note(A, "first try\nwith the BGR bug", "alice", "web")
    notes.set_note(A, "fixed: RGB", "bob", "api")
    got = notes.rename(A, "  lite0 reference  ", "carol", "api")
    assert (got.display_name, got.named_by, got.note, got.note_by) == ("lite0 reference", "carol", "fixed: RGB", "bob")
    assert got.named_at is not None and got.note_at is not None
    # the record is untouched: its name and result hash are as stored
    record = store.get(A)
    assert record.manifest.name == "efficientnet-lite0"
    assert record.result_hash == make_record(A, TOP1_A).result_hash
    entries, total = notes.audit(run_id=A)
    assert total == 4
    assert [(e.action, e.actor, e.via) for e in entries] == [
        ("rename", "carol", "api"),
        ("note", "bob", "api"),
        ("note", "alice", "web"),
        ("tag", "alice", "cli"),
    ]
    assert entries[1].before == {"note": "first try\nwith the BGR bug"} and entries[1].after == {"note": "fixed: RGB"}
    assert entries[0].before == {"display_name": None} and entries[0].after == {"display_name": "lite0 reference"}
    assert entries[3].after == {"tags": ["baseline", "paper:v2"]}
    got = notes.remove_tags(A, ["baseline"], "bob", "web")
    assert [t.tag for t in got.tags] == ["paper:v2"]
    assert notes.rename(A, None, "carol", "api").display_name is None
    assert notes.labels([A, B]) == {A: notes.labels([A])[A]}
    assert notes.labels([A])[A].tags == ["paper:v2"]


def test_list_filters_by_tag_and_searches_tags_notes_and_names(store: RunStore) -> None:
    notes = store.annotations
    notes.add_tags(B, ["ablation-7"], "alice", "cli")
    notes.set_note(A, "Compared against the PAPER table 3", "alice", "cli")
    notes.rename(B, "torch port (Ünïcode)", "carol", "cli")

    def ids(query: RunQuery) -> list[str]:
        return [r.run_id for r in store.query_runs(query)[0]]

    assert ids(RunQuery(tag="ablation-7")) == [B]
    assert ids(RunQuery(tag="ablation")) == []  # a tag filter is exact
    assert ids(RunQuery(search="ABLATION")) == [B]  # the search is case-insensitive and finds tags
    assert ids(RunQuery(search="paper table")) == [A]  # notes
    assert ids(RunQuery(search="torch port")) == [B]  # display names
    assert sorted(ids(RunQuery(search="efficientnet"))) == [A, B]  # the record's own name still
    assert ids(RunQuery(search="100%")) == []  # LIKE wildcards are text
    assert ids(RunQuery(tag="ablation-7", runtime="onnxruntime")) == []
    with pytest.raises(InvalidInputError, match="tag: 'has space' is not a tag") as err:
        store.query_runs(RunQuery(tag="has space"))
    assert err.value.field == "tag"


@pytest.mark.parametrize(
    ("call", "field", "rule"),
    [
        (lambda n: n.add_tags(A, ["has space"], "a", "cli"), "tag", "1 to 64 characters"),
        (lambda n: n.add_tags(A, ["x" * 65], "a", "cli"), "tag", "1 to 64 characters"),
        (lambda n: n.add_tags(A, ["tab\u0007bell"], "a", "cli"), "tag", "letters A-Z"),
        (lambda n: n.add_tags(A, ["ünï"], "a", "cli"), "tag", "letters A-Z"),
        (lambda n: n.add_tags(A, [], "a", "cli"), "tags", "at least one"),
        (lambda n: n.set_note(A, "x" * (MAX_NOTE_CHARS + 1), "a", "cli"), "note", "at most 10000"),
        (lambda n: n.set_note(A, "bidi \u202e override", "a", "cli"), "note", "U+202E"),
        (lambda n: n.rename(A, "x" * 201, "a", "cli"), "display_name", "1 to 200"),
        (lambda n: n.rename(A, "   ", "a", "cli"), "display_name", "1 to 200"),
        (lambda n: n.rename(A, "nul\x00name", "a", "cli"), "display_name", "U+0000"),
        (lambda n: n.set_note(A, "ok", "", "cli"), "actor", "1 to 200"),
        (lambda n: n.set_note(A, "ok", "a", "mail"), "via", "cli, api, web"),
    ],
)
def test_bad_values_name_the_field_and_the_rule(store: RunStore, call: Any, field: str, rule: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(rule)) as err:
        call(store.annotations)
    assert err.value.field == field
    assert store.annotations.audit(run_id=A)[1] == 0  # nothing written
    assert store.annotations.get(A).tags == []


def test_at_most_32_tags(store: RunStore) -> None:
    store.annotations.add_tags(A, [f"t{i}" for i in range(MAX_TAGS)], "a", "cli")
    with pytest.raises(InvalidInputError, match="has 32 tags; 1 more would pass the limit of 32") as err:
        store.annotations.add_tags(A, ["one-more"], "a", "cli")
    assert err.value.field == "tags"
    assert len(store.annotations.get(A).tags) == MAX_TAGS


def test_untag_unknown_tag_and_unknown_run(store: RunStore) -> None:
    with pytest.raises(NotFoundError, match="has no tag 'absent'"):
        store.annotations.remove_tags(A, ["absent"], "a", "cli")
    with pytest.raises(UnknownIdError, match="unknown run id 'ffffffff'"):
        store.annotations.add_tags("ffffffff", ["x"], "a", "cli")
    with pytest.raises(UnknownIdError):
        store.annotations.delete_run("ffffffff", "a", "cli")


def test_delete_removes_the_run_everywhere_and_the_audit_keeps_what_was_deleted(store: RunStore) -> None:
    notes = store.annotations
    notes.add_tags(A, ["baseline"], "alice", "cli")
    notes.set_note(A, "keep me in the audit", "alice", "cli")
    notes.rename(A, "reference run", "carol", "cli")
    store.save_trace(A, "op", {"traceEvents": []})
    record = store.get(A)
    top1 = record.metric("top1")
    assert top1 is not None
    entry = notes.delete_run(A[:10], "root", "api")
    assert (entry.action, entry.actor, entry.via, entry.run_id, entry.after) == ("delete", "root", "api", A, None)
    before = entry.before or {}
    assert before["manifest_name"] == "efficientnet-lite0" and before["manifest_version"] == "1.0.0"
    assert before["result_hash"] == record.result_hash
    assert (before["metric_name"], before["metric_value"]) == ("top1", top1.value)
    assert (before["metric_low"], before["metric_high"]) == (top1.ci_low, top1.ci_high)
    assert (before["display_name"], before["note"], before["tags"]) == (
        "reference run",
        "keep me in the audit",
        ["baseline"],
    )
    assert [r.run_id for r in store.query_runs()[0]] == [B]
    with pytest.raises(UnknownIdError):
        store.get(A)
    assert store.load_trace(A) is None
    assert notes.deletion(A) == entry
    assert notes.deletion(B) is None
    # the audit keeps every earlier entry of the deleted run; nothing else of it is left
    assert [e.action for e in notes.audit(run_id=A)[0]] == ["delete", "rename", "note", "tag"]
    assert [e.action for e in notes.audit(run_id=A[:6])[0]] == ["delete", "rename", "note", "tag"]  # a prefix
    assert notes.audit(run_id="ffffff") == ([], 0)
    with store.engine.connect() as conn:
        for table in ("runs", "sample_predictions", "run_tags", "run_labels", "traces"):
            assert conn.execute(text(f"SELECT count(*) FROM {table} WHERE run_id = :r"), {"r": A}).scalar() == 0
    assert notes.audit(action="delete")[1] == 1
    with pytest.raises(InvalidInputError, match="action: 'drop' is not an action"):
        notes.audit(action="drop")


def test_migration_creates_the_tables(url: str, store: RunStore) -> None:
    tables = set(inspect(store.engine).get_table_names())
    assert {"run_tags", "run_labels", "run_audit"} <= tables


def test_sqlite_cascade_removes_annotations_with_the_run(tmp_path: Path) -> None:
    """A run removed by the older ``RunStore.delete`` takes its tags and labels with it (foreign keys)."""
    with RunStore(f"sqlite:///{tmp_path / 'r.db'}") as s:
        s.save(make_record(A, TOP1_A))
        s.annotations.add_tags(A, ["x"], "a", "cli")
        s.annotations.set_note(A, "n", "a", "cli")
        s.delete(A)
        with s.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM run_tags")).scalar() == 0
            assert conn.execute(text("SELECT count(*) FROM run_labels")).scalar() == 0


def test_the_tag_filter_reads_the_tags_index(tmp_path: Path) -> None:
    """The store's own tag query (``RunQuery(tag=)``) goes through ``ix_run_tags_tag``, not a probe per run."""
    from sqlalchemy.dialects import sqlite

    from repliscope.store.runs import _run_query_params, _runs_statements

    with RunStore(f"sqlite:///{tmp_path / 'r.db'}") as s, s.engine.connect() as conn:
        params = _run_query_params(RunQuery(tag="baseline"), "-created_at", 1, 50)
        page, _count = _runs_statements(("run_id",), "-created_at", ("tag",))
        compiled = page.compile(dialect=sqlite.dialect())
        args = tuple(params[name] for name in compiled.positiontup or ())
        plan = " ".join(str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", args))
    assert "ix_run_tags_tag" in plan, plan

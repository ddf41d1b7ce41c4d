"""runs.verdict follows the interval-width rule (migration 0008, ``evaluation.claims.shown_verdict``): a record
judged "consistent" inside an interval wider than ±2 pt before the rule is listed and filtered as "not comparable",
at insert (``runs import`` of an old record) and in a store that held it before the rule."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from repliscope.evaluation.record import EvaluationRecord
from repliscope.store.runs import RunQuery
from tests.report import factories


def _old_rule_record() -> EvaluationRecord:
    """factories.record() (18 of 20 right, ±13 pt) with its claim judged "consistent" the way the old rule did."""
    record = factories.record()
    claim = record.claims[0].model_copy(update={"verdict": "consistent", "reason": "inside the interval"})
    return record.model_copy(update={"claims": [claim]})


def test_an_old_wide_consistent_record_is_stored_as_not_comparable(tmp_path: Path) -> None:
    from repliscope.store.repository import RunStore

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    record = _old_rule_record()
    with RunStore(url) as store:
        store.save(record)
        assert [r.verdict for r in store.list()] == ["not comparable"]
        assert store.query_runs(RunQuery(verdict="consistent"))[1] == 0
        assert store.get(record.run_id).claims[0].verdict == "consistent"  # the record's JSON is left as judged


def test_a_store_from_before_the_rule_is_migrated(tmp_path: Path) -> None:
    from alembic import command

    from repliscope.store.migrate import _config, current, upgrade
    from repliscope.store.repository import RunStore

    url = f"sqlite:///{tmp_path / 'old.db'}"
    narrow, wide = factories.record(), _old_rule_record().model_copy(update={"run_id": "wide0000"})
    narrow_claim = narrow.claims[0].model_copy(
        update={"verdict": "consistent", "ci_low": 0.74, "ci_high": 0.78, "reason": "inside"}
    )
    narrow = narrow.model_copy(update={"claims": [narrow_claim]})
    with RunStore(url) as store:
        store.save(narrow)
        store.save(wide)
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # as a store written before the rule held them
        conn.execute(sa.text("UPDATE runs SET verdict = 'consistent'"))
        command.downgrade(_config(conn), "0007")
    assert current(engine) == "0007"
    assert upgrade(url).changed
    with engine.connect() as conn:
        verdicts: dict[str, str] = dict(conn.execute(sa.text("SELECT run_id, verdict FROM runs")).tuples().all())
    engine.dispose()
    assert verdicts == {narrow.run_id: "consistent", "wide0000": "not comparable"}

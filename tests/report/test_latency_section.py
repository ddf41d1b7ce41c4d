"""The report's timing table: what its throughput is over."""

from __future__ import annotations

from repliscope.evaluation.record import EvaluationRecord
from repliscope.report import sections as sec


def test_the_throughput_row_says_when_samples_were_read_ahead(run_record: EvaluationRecord) -> None:
    _, plain = sec.latency(run_record, sec.embed_sink)
    assert ("throughput (measured loop)", f"{run_record.timings.throughput_samples_per_second:.1f} samples/s") in plain
    ahead = run_record.model_copy(update={"timings": run_record.timings.model_copy(update={"read_ahead_samples": 744})})
    _, rows = sec.latency(ahead, sec.embed_sink)
    labels = [label for label, _ in rows]
    assert "throughput (measured loop + 744 samples read ahead while the model loaded)" in labels
    assert "throughput (measured loop)" not in labels

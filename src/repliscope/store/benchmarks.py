"""The benchmarks store: benchmark records (``benchmarks`` table), their latencies as zlib-compressed
little-endian float32 microseconds."""

from __future__ import annotations

import builtins
import zlib
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from sqlalchemy import func, select

from repliscope.bench.record import BenchmarkRecord
from repliscope.store.database import Database, resolve_id, utc_naive
from repliscope.store.models import BenchmarkRow
from repliscope.store.stored_once import add_once


def benchmark_row(record: BenchmarkRecord) -> BenchmarkRow:
    blob = zlib.compress(np.asarray(record.latencies_us, dtype="<f4").tobytes(), 6)
    p90 = record.latency.percentiles.get("p90")
    return BenchmarkRow(
        benchmark_id=record.benchmark_id,
        created_at=utc_naive(record.created_at),
        manifest_name=record.manifest.name,
        runtime=str(record.runtime.get("runtime", "")),
        scenario=record.scenario,
        threads=record.threads,
        queries=record.queries,
        p90_ms=p90.value if p90 else None,
        throughput=record.throughput_samples_per_second,
        matrix_id=record.matrix_id,
        record=record.model_dump(mode="json", exclude={"latencies_us"}),
        latencies=blob,
    )


@dataclass(frozen=True)
class BenchmarkSummary:
    """A stored benchmark as a list shows it (the ``benchmarks`` table's columns; ``created_at`` naive UTC)."""

    benchmark_id: str
    created_at: datetime
    manifest_name: str
    runtime: str
    scenario: str
    threads: int | None
    queries: int
    p90_ms: float | None
    throughput: float


class BenchmarkStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def save(self, record: BenchmarkRecord) -> None:
        """Store a benchmark record (a stored id is a ConflictError)."""
        add_once(self.db, benchmark_row(record), "benchmark", record.benchmark_id)

    def get(self, benchmark_id: str) -> BenchmarkRecord:
        """The benchmark record ``benchmark_id`` (or a unique prefix of at least 6 characters)."""
        with self.db.session() as session:
            full_id = resolve_id(
                session,
                BenchmarkRow.benchmark_id,
                benchmark_id,
                "benchmark",
                newest_first=BenchmarkRow.created_at,
                recent_in=self.db.shown_url,
            )
            row = session.get_one(BenchmarkRow, full_id)
            data = dict(row.record)
            latencies = np.frombuffer(zlib.decompress(row.latencies), dtype="<f4")
        data["latencies_us"] = latencies.astype(np.float64).tolist()
        return BenchmarkRecord.model_validate(data)

    def count(self) -> int:
        """How many benchmark records are stored."""
        with self.db.session() as session:
            return int(session.scalar(select(func.count()).select_from(BenchmarkRow)) or 0)

    def list(self, limit: int = 50, matrix_id: str | None = None) -> list[BenchmarkRecord]:
        """Benchmark records, newest first (all of one matrix run with ``matrix_id``)."""
        query = select(BenchmarkRow.benchmark_id).order_by(BenchmarkRow.created_at.desc())
        if matrix_id is not None:
            query = query.where(BenchmarkRow.matrix_id == matrix_id)
        with self.db.session() as session:
            ids = session.scalars(query.limit(limit)).all()
        return [self.get(i) for i in ids]

    def page(self, manifest_name: str | None, limit: int, offset: int) -> tuple[builtins.list[BenchmarkSummary], int]:
        """One page of benchmarks, newest first (ties by id), of the manifest ``manifest_name`` (exact; None: all),
        read from the table's columns (no latencies decoded), and how many match in all."""
        where = [] if manifest_name is None else [BenchmarkRow.manifest_name == manifest_name]
        query = select(
            BenchmarkRow.benchmark_id,
            BenchmarkRow.created_at,
            BenchmarkRow.manifest_name,
            BenchmarkRow.runtime,
            BenchmarkRow.scenario,
            BenchmarkRow.threads,
            BenchmarkRow.queries,
            BenchmarkRow.p90_ms,
            BenchmarkRow.throughput,
        ).where(*where)
        with self.db.session() as session:
            total = int(session.scalar(select(func.count()).select_from(BenchmarkRow).where(*where)) or 0)
            rows = session.execute(
                query.order_by(BenchmarkRow.created_at.desc(), BenchmarkRow.benchmark_id).limit(limit).offset(offset)
            ).all()
        return [BenchmarkSummary(*row) for row in rows], total

    def manifest_names(self) -> builtins.list[str]:
        """The manifest names that have a stored benchmark, sorted (a list page's filter choices)."""
        with self.db.session() as session:
            return list(
                session.scalars(select(BenchmarkRow.manifest_name).distinct().order_by(BenchmarkRow.manifest_name))
            )

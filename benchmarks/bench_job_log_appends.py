"""Appends per second to a job's stored log (``JobStore.update(append_log=...)``, as an agent's lines arrive), on a
temporary SQLite store, for logs of 100 lines, 10,000 lines and 200,000 lines (~35 MiB, what an agent that logged
for days left before the store capped logs): "uncapped" is the code before the cap (``capped_log`` replaced by
the identity), "capped" the store as it is (past 8 MiB the log is cut to its newest 6 MiB, so the 200,000-line
case appends to a 6-8 MiB row). The two sides alternate, ROUNDS rounds of APPENDS appends each, and the median
rate is printed with the 1-minute load average before and after (the machine is shared: compare ratios within one
run). Each append still rewrites the whole TEXT value (SQLite and PostgreSQL both write a whole updated value;
``log = log || :line`` in SQL measured no faster), so the rate falls with the log's size: the cap bounds it.
Usage: python benchmarks/bench_job_log_appends.py [--rounds 5] [--appends 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import text

from repliscope.service import job_log
from repliscope.store import jobs
from repliscope.store.repository import RunStore
from repliscope.store.service_tables import create_job, get_job, update_job


def _log(lines: int) -> str:
    return "\n".join(job_log.entries(f"line {i} " + "x" * 80, "agent a1") for i in range(lines)) + "\n"


def _rate(store: RunStore, job_id: str, line: str, appends: int, cap: Callable[[str], str]) -> float:
    setattr(jobs, "capped_log", cap)  # noqa: B010 (the code before the cap, or as it is)
    start = time.perf_counter()
    for _ in range(appends):
        update_job(store, job_id, append_log=line)
    return appends / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--appends", type=int, default=30)
    args = parser.parse_args()
    capped = jobs.capped_log
    line = job_log.entries("progress 5/20 " + "y" * 60, "agent a1")
    print(f"load average (1 min) before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as folder, RunStore(f"sqlite:///{Path(folder) / 'runs.db'}") as store:
        for lines in (100, 10_000, 200_000):
            log = _log(lines)
            ids = {}
            for side in ("uncapped", "capped"):
                ids[side] = create_job(store, "evaluate", "m@1", "onnxruntime", "d", {}).id
                with store.engine.begin() as conn:
                    conn.execute(text("UPDATE jobs SET log = :log WHERE id = :id"), {"log": log, "id": ids[side]})
            rates: dict[str, list[float]] = {"uncapped": [], "capped": []}
            for _ in range(args.rounds):
                rates["uncapped"].append(_rate(store, ids["uncapped"], line, args.appends, lambda log: log))
                rates["capped"].append(_rate(store, ids["capped"], line, args.appends, capped))
            setattr(jobs, "capped_log", capped)  # noqa: B010
            sizes = {side: len(get_job(store, ids[side]).log.encode()) / (1 << 20) for side in ids}
            med = {side: statistics.median(r) for side, r in rates.items()}
            print(
                f"{lines:>7} lines ({len(log.encode()) / (1 << 20):.2f} MiB): uncapped {med['uncapped']:.0f} "
                f"appends/s (row {sizes['uncapped']:.2f} MiB), capped {med['capped']:.0f} appends/s "
                f"(row {sizes['capped']:.2f} MiB), capped/uncapped {med['capped'] / med['uncapped']:.2f}"
            )
    print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

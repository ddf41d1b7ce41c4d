"""What the agents page and the stack-matrix page show: rows assembled from ``AgentInfo`` (the cluster's agents)
and ``StackMatrix`` (a stored ``repliscope stacks`` result); no HTTP here."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from repliscope.number_text import percent_text


@dataclass(frozen=True)
class AgentRow:
    agent_id: str
    alive: bool
    hostname: str
    address: str
    stack: str
    runtimes: list[str]
    """``runtime: distribution version, ...`` per available runtime (its main distribution first; the installed
    ones)"""
    software: str
    """repliscope and Python versions"""
    cpu: str
    cores: int
    memory: str
    executing: int
    last_seen: str


def _when(value: datetime | None) -> str:
    if value is None:
        return "—"
    value = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def stack_label(stack: dict[str, Any] | None) -> str:
    """``spec (key)`` of an agent's stack, ``current`` for an agent in the service's own kind of environment."""
    if not stack:
        return "—"
    key, spec = str(stack.get("key") or "?"), str(stack.get("spec") or "")
    return key if not spec or spec == key else f"{spec} ({key})"


def agent_rows(agents: list[Any]) -> list[AgentRow]:
    """One row per ``AgentInfo`` (as listed: alive first)."""
    rows = []
    for a in agents:
        c = a.capabilities
        runtimes = [
            f"{name}: " + ", ".join(f"{dist} {ver}" for dist, ver in dists.items() if ver is not None)
            for name, dists in sorted(c.runtimes.items())
        ]
        rows.append(
            AgentRow(
                agent_id=c.agent_id,
                alive=bool(a.alive),
                hostname=c.hostname,
                address=a.address or "—",
                stack=stack_label(c.stack),
                runtimes=runtimes,
                software=f"repliscope {c.repliscope_version}, Python {c.python}",
                cpu=c.cpu_model or "—",
                cores=int(c.cores),
                memory=f"{c.memory_gib:.1f} GiB" if c.memory_gib is not None else "—",
                executing=int(a.executing),
                last_seen=_when(a.last_seen),
            )
        )
    return rows


# --- stack matrices ---------------------------------------------------------------------------------------------


def _num(value: float | None, digits: int) -> str:
    """A quantity that is no metric (seconds, samples per second) with ``digits`` decimals; ``—`` for None."""
    return "—" if value is None else f"{value:.{digits}f}"


def _metric(name: str, value: float | None) -> str:
    """A stack's metric in the house's format (:mod:`repliscope.tasks.metric_text`): top-1 ``90.00 %``, AP
    ``0.3741``; ``—`` for None."""
    from repliscope.tasks.metric_text import value_text

    return value_text(name, value)


def _share(value: float | None) -> str:
    """A share of samples (two stacks' agreement) in percent, as the runs' pages: ``95.00 %``; ``—`` for None."""
    return "—" if value is None else percent_text(value)


def _sci(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


@dataclass(frozen=True)
class StackLine:
    key: str
    spec: str
    versions: str
    agent_id: str
    run_id: str | None
    top1: str
    top5: str
    ap: str
    result_hash: str
    seconds: str
    throughput: str
    error: str | None
    """why the stack could not run the job (then no run, metrics or pairs)"""


@dataclass(frozen=True)
class PairLine:
    a: str
    b: str
    agreement: str
    flips_ab: list[str]
    flips_ba: list[str]
    max_abs: str
    mean_abs: str
    hash_equal: bool


@dataclass(frozen=True)
class MatrixPage:
    matrix_id: str
    created_at: str
    manifest: str
    manifest_sha256: str
    runtime: str
    dataset_identity: str
    samples: int
    stacks: list[StackLine]
    pairs: list[PairLine]


def matrix_page(m: Any) -> MatrixPage:
    """The page of the ``StackMatrix`` ``m``: one line per stack, one per pair (labels: each stack's spec)."""
    label = {s.key: s.spec or s.key for s in m.stacks}
    stacks = [
        StackLine(
            key=s.key,
            spec=s.spec or s.key,
            versions=", ".join(f"{k} {v}" for k, v in sorted(s.versions.items())) or "—",
            agent_id=s.agent_id or "—",
            run_id=s.run_id,
            top1=_metric("top1", s.top1),
            top5=_metric("top5", s.top5),
            ap=_metric("AP", s.ap),
            result_hash=s.result_hash or "—",
            seconds=_num(s.seconds, 2),
            throughput=_num(s.throughput, 1),
            error=s.error,
        )
        for s in m.stacks
    ]
    pairs = [
        PairLine(
            a=label.get(p.a, p.a),
            b=label.get(p.b, p.b),
            agreement=_share(p.agreement),
            flips_ab=list(p.flips_ab),
            flips_ba=list(p.flips_ba),
            max_abs=_sci(p.max_abs_output_diff),
            mean_abs=_sci(p.mean_abs_output_diff),
            hash_equal=bool(p.result_hash_equal),
        )
        for p in m.pairs
    ]
    return MatrixPage(
        matrix_id=m.matrix_id,
        created_at=_when(m.created_at),
        manifest=f"{m.manifest.name}@{m.manifest.version}",
        manifest_sha256=m.manifest.sha256,
        runtime=m.runtime,
        dataset_identity=str(m.dataset.identity),
        samples=int(m.dataset.n),
        stacks=stacks,
        pairs=pairs,
    )


@dataclass(frozen=True)
class MatrixLink:
    matrix_id: str
    created_at: str
    manifest: str
    stacks: str
    min_agreement: str
    hashes_equal: bool


def matrix_links(matrices: list[Any]) -> list[MatrixLink]:
    """The list rows of stored matrices (newest first, as the store lists them)."""
    out = []
    for m in matrices:
        agreements = [p.agreement for p in m.pairs if p.agreement is not None]
        out.append(
            MatrixLink(
                matrix_id=m.matrix_id,
                created_at=_when(m.created_at),
                manifest=f"{m.manifest.name}@{m.manifest.version}",
                stacks=" · ".join((s.spec or s.key) + (" (failed)" if s.error else "") for s in m.stacks),
                min_agreement=_share(min(agreements)) if agreements else "—",
                hashes_equal=all(p.result_hash_equal for p in m.pairs),
            )
        )
    return out

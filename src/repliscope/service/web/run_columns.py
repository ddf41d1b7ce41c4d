"""The runs table's column chooser (as MLflow's "Columns" menu): which columns the table shows.

The run id (with its compare tick box) is always shown; every other column has a name a URL may give:
``/runs?cols=model,runtime,metric`` (or ``cols`` repeated, as the chooser's form sends it) shows those columns, so
a link reproduces a view; without ``cols`` the table shows :data:`DEFAULT`, which fits a 1280 px window without
sideways scrolling. An unknown name is refused with 422 naming the allowed ones (a link that silently showed
other columns would mislead). The choice also persists in the browser: ``static/runs.js`` keeps it in
``localStorage`` (key :data:`STORAGE_KEY`) and applies it when the URL gives no ``cols``; without JavaScript the
chooser is a plain GET form.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """A choosable column: ``key`` its name in ``cols``, ``label`` its header, ``sort`` the sort key its header
    links (None: not sortable), ``default`` whether it is shown without a choice."""

    key: str
    label: str
    sort: str | None
    default: bool


COLUMNS: tuple[Column, ...] = (
    Column("date", "Created (UTC)", "created_at", True),
    Column("kind", "Kind", "kind", False),
    Column("model", "Model", "model", True),
    Column("variant", "Variant", "variant", True),
    Column("runtime", "Runtime", "runtime", True),
    Column("hardware", "Hardware", "hardware", False),
    Column("dataset", "Dataset", "dataset", True),
    Column("samples", "Samples", "samples", True),
    Column("metric", "Metric", "metric", True),
    Column("interval", "95 % interval (under the metric)", None, True),
    Column("verdict", "Verdict", "verdict", True),
    Column("manifest", "Manifest sha256", None, False),
    Column("hash", "Result hash", None, True),
    Column("tags", "Tags", None, True),
)
"""Every choosable column in table order (the interval is shown under its metric, in the metric's cell)."""
KEYS = tuple(c.key for c in COLUMNS)
DEFAULT = tuple(c.key for c in COLUMNS if c.default)
STORAGE_KEY = "repliscope.runs.columns"
"""The ``localStorage`` key ``static/runs.js`` keeps the choice under (a comma-separated list of names)."""
MAX_NAMES = 50
"""At most this many names in ``cols`` (the form sends each column once; a longer list is refused)."""


@dataclass(frozen=True)
class Choice:
    """The columns shown: ``shown`` their names, ``given`` whether the URL chose them (``cols`` present: the
    links of the page carry it on)."""

    shown: tuple[str, ...]
    given: bool

    @property
    def off(self) -> frozenset[str]:
        """The columns rendered hidden (the browser shows them again when ticked, without a reload)."""
        return frozenset(KEYS) - frozenset(self.shown)

    @property
    def param(self) -> str:
        """The ``cols`` value of this choice (``model,runtime,metric``)."""
        return ",".join(self.shown)

    @property
    def columns(self) -> tuple[Column, ...]:
        return COLUMNS

    @property
    def storage_key(self) -> str:
        return STORAGE_KEY


def choose(values: Iterable[str] | None) -> Choice:
    """The columns of the ``cols`` query values (each a comma-separated list; None or no value at all: the
    defaults; the chooser form's empty value alone: only the run id). Raises ValueError naming the first unknown
    name and the allowed ones."""
    if values is None:
        return Choice(DEFAULT, False)
    given = list(values)
    if not given:
        return Choice(DEFAULT, False)
    names = [n.strip() for v in given for n in v.split(",") if n.strip()]
    if len(names) > MAX_NAMES:
        raise ValueError(f"cols: at most {MAX_NAMES} column names, got {len(names)}")
    unknown = [n for n in names if n not in KEYS]
    if unknown:
        raise ValueError(f"cols: unknown column '{unknown[0][:40]}'; the columns are {', '.join(KEYS)}")
    chosen = set(names)
    return Choice(tuple(k for k in KEYS if k in chosen), True)

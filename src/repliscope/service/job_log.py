"""A job's log lines: each one stored with its time (UTC, ISO 8601), level (``info``, ``warning``, ``error``) and
source (``service``, ``agent <id>``, ``shard <i>/<n>``), read back as :class:`LogLine`.

The jobs table keeps a job's log in its one text column (no schema change): one JSON object a line,
``{"v": 1, "t": "2026-11-29T09:35:17Z", "level": "info", "source": "service", "msg": "..."}``, written by the
executors (:mod:`repliscope.service.executor`) through :func:`entries`. A cancel request also carries
``"event": "cancel", "by": <token name>``. Logs stored before this format (plain text, one message a line) read
as lines without a time (their level guessed from their words, :func:`level_of`); :func:`parse` accepts both, line
by line, so an old job's log and a new one read the same way. The store keeps the newest lines within 8 MiB
(:func:`repliscope.store.jobs.capped_log`: a first plain-text line ``warning: N earlier log lines dropped: ...``),
and what serves a log serves its newest lines within a byte bound (:func:`as_text_tail`, :func:`messages_tail`).

What a line shows is made inert here (:func:`clean`): terminal escape sequences (ANSI colours, cursor moves, OSC
titles) and other control characters are removed; HTML is escaped by the page's template, never here."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "LEVELS",
    "MAX_MESSAGE_CHARS",
    "SERVICE",
    "CancelNote",
    "LogLine",
    "SourceTracker",
    "as_text",
    "as_text_tail",
    "cancel_note",
    "clean",
    "entries",
    "level_of",
    "messages",
    "messages_tail",
    "parse",
    "parse_tail",
]

LEVELS = ("info", "warning", "error")
MAX_MESSAGE_CHARS = 10_000
"""The longest message a stored line keeps (:func:`entries` cuts a longer one, saying how much it cut): an agent's
line cannot grow the log, or a page showing it, without bound."""
SERVICE = "service"
"""The source of the lines the service itself writes (the job's start and end, an in-process job's own lines)."""
VERSION = 1
_PREFIX = '{"v":1,'
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erase
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: a terminal title, a hyperlink
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[@-Z\\-_]?"  # any other escape (a lone ESC too)
    r"|\x9b[0-?]*[ -/]*[@-~]"  # the 8-bit CSI
)
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_ERROR_WORDS = ("error:", "error ", "internal error", "interrupted", "the agent's traceback")
_AGENT_ERROR = re.compile(r"^agent \S+: [A-Za-z_][A-Za-z0-9_.]*(?:Error|Exception|Failure)\b")


@dataclass(frozen=True)
class LogLine:
    """One line of a job's log: ``time`` (``YYYY-MM-DDTHH:MM:SSZ``, None for a line stored before times were),
    ``level`` (one of :data:`LEVELS`), ``source`` ("" when not known), ``message`` (inert: :func:`clean`)."""

    time: str | None
    level: str
    source: str
    message: str


@dataclass(frozen=True)
class CancelNote:
    """Who asked to cancel a job (a token name) and when (UTC, ISO 8601)."""

    by: str
    time: str


def now() -> str:
    """The time a line is written: UTC, to the second, ``2026-11-29T09:35:17Z``."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def clean(text: str) -> str:
    """``text`` with terminal escape sequences and control characters removed (a tab stays)."""
    return _CONTROLS.sub("", _ANSI.sub("", text))


def level_of(message: str) -> str:
    """The level a message's words say: ``error`` (``error: ...``, an internal error, an interrupted job, an
    agent's exception), ``warning`` (``warning: ...``, a cancel), else ``info``."""
    text = clean(message).strip().lower()
    if text.startswith(_ERROR_WORDS) or _AGENT_ERROR.match(clean(message).strip()):
        return "error"
    if text.startswith(("warning", "cancel")):
        return "warning"
    return "info"


def entries(text: str, source: str = SERVICE, level: str | None = None, at: str | None = None, **event: str) -> str:
    """``text`` as stored log lines: one JSON line per line of ``text`` (blank lines dropped), each with the time
    ``at`` (default: now), ``level`` (default: :func:`level_of` of that line) and ``source``; ``event`` adds fields
    (a cancel: ``event="cancel", by=<token name>``)."""
    if level is not None and level not in LEVELS:
        raise ValueError(f"level {level!r} is not a log level (allowed: {', '.join(LEVELS)})")
    stamp = at or now()
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields: dict[str, Any] = {
            "v": VERSION,
            "t": stamp,
            "level": level or level_of(line),
            "source": source,
            "msg": _bounded(line),
        }
        out.append(json.dumps({**fields, **event}, ensure_ascii=False, separators=(",", ":")))
    return "\n".join(out)


def _bounded(line: str) -> str:
    """``line`` cut to :data:`MAX_MESSAGE_CHARS`, ending ``… [N characters cut]`` when it was longer."""
    if len(line) <= MAX_MESSAGE_CHARS:
        return line
    return f"{line[:MAX_MESSAGE_CHARS]} … [{len(line) - MAX_MESSAGE_CHARS} characters cut]"


def _decode(line: str) -> dict[str, Any] | None:
    """The fields of a stored JSON line, or None when ``line`` is not one (a line stored before the format)."""
    if not line.startswith(_PREFIX):
        return None
    try:
        fields = json.loads(line)
    except ValueError:
        return None
    if not isinstance(fields, dict) or fields.get("v") != VERSION or not isinstance(fields.get("msg"), str):
        return None
    return fields


def _line(raw: str) -> LogLine | None:
    """One stored line read (None for a blank one)."""
    fields = _decode(raw)
    if fields is None:
        return LogLine(None, level_of(raw), "", clean(raw)) if raw.strip() else None
    level = fields.get("level")
    stamp = fields.get("t")
    return LogLine(
        stamp if isinstance(stamp, str) else None,
        level if level in LEVELS else level_of(fields["msg"]),
        clean(str(fields.get("source") or "")),
        clean(fields["msg"]),
    )


def parse(text: str) -> list[LogLine]:
    """Every line of a stored log, old (plain text: no time, no source) or new (JSON lines), in order."""
    return [line for line in map(_line, text.splitlines()) if line is not None]


def parse_tail(text: str, count: int) -> tuple[list[LogLine], int]:
    """The newest ``count`` lines of a stored log, in order, and how many lines it holds: only those ``count`` are
    decoded, however long the log (a page shows the newest ones)."""
    raws = [raw for raw in text.splitlines() if raw.strip()]
    tail = [line for line in map(_line, raws[max(0, len(raws) - count) :]) if line is not None]
    return tail, len(raws)


def _text_line(line: LogLine) -> str:
    return f"{line.time or '-':20} {line.level:7} [{line.source or '-'}] {line.message}\n"


def messages(text: str) -> str:
    """A stored log as plain text, one message a line as logs read before times were stored (the API's
    ``GET /api/v1/jobs/{id}/log``)."""
    return "".join(f"{line.message}\n" for line in parse(text))


def as_text(text: str) -> str:
    """A stored log as a text file: ``TIME LEVEL [SOURCE] MESSAGE`` a line (``-`` for a line with no time)."""
    return "".join(_text_line(line) for line in parse(text))


def as_text_tail(text: str, max_bytes: int) -> str:
    """:func:`as_text` of the newest lines of a stored log that fit in ``max_bytes`` (UTF-8), only those decoded;
    when lines were left out the text starts with a line saying how many (a download stays bounded)."""
    kept, left_out = _tail(text, max_bytes, None, _text_line)
    head = (
        f"{'-':20} {'info':7} [{SERVICE}] {_left_out_note(left_out, len(kept), max_bytes, 'download')}\n"
        if left_out
        else ""
    )
    return head + "".join(kept)


def messages_tail(text: str, max_bytes: int, count: int | None = None) -> tuple[str, int]:
    """:func:`messages` of the newest lines of a stored log that fit in ``max_bytes`` (UTF-8), at most ``count`` of
    them (None: as many as fit), only those decoded, and how many lines were left out; when some were, the text
    starts with a line saying how many (the API's ``GET /api/v1/jobs/{id}/log`` stays bounded)."""
    kept, left_out = _tail(text, max_bytes, count, lambda line: f"{line.message}\n")
    head = f"{_left_out_note(left_out, len(kept), max_bytes, 'text')}\n" if left_out else ""
    return head + "".join(kept), left_out


def _left_out_note(left_out: int, kept: int, max_bytes: int, what: str) -> str:
    return f"{left_out} earlier lines left out: this {what} holds the newest {kept} lines, at most {max_bytes} bytes"


def _tail(text: str, max_bytes: int, count: int | None, render: Callable[[LogLine], str]) -> tuple[list[str], int]:
    """The newest lines of a stored log, rendered, in order, that fit in ``max_bytes`` (UTF-8, less 200 for the
    line saying what was left out) and number at most ``count`` (None: no count), only those decoded; and how
    many lines were left out."""
    raws = [raw for raw in text.splitlines() if raw.strip()]
    budget = max_bytes - 200  # the first line saying what was left out
    kept: list[str] = []
    size = 0
    for raw in reversed(raws if count is None else raws[max(0, len(raws) - count) :]):
        line = _line(raw)
        if line is None:
            continue
        shown = render(line)
        size += len(shown.encode())
        if size > budget:
            break
        kept.append(shown)
    return kept[::-1], len(raws) - len(kept)


def cancel_note(text: str) -> CancelNote | None:
    """The last cancel request a stored log records (who, when), or None."""
    note = None
    for raw in text.splitlines():
        fields = _decode(raw) if '"event":"cancel"' in raw else None  # only a cancel line is decoded
        if fields is not None and fields.get("event") == "cancel" and isinstance(fields.get("t"), str):
            note = CancelNote(clean(str(fields.get("by") or "?")), fields["t"])
    return note


class SourceTracker:
    """The source of each line an agents' job sends through its ``log`` callback
    (:func:`repliscope.agents.submit.submit_job`): ``[shard I/N] ...`` lines belong to that shard; once a line
    ``running on agent ID`` arrives, the following lines (of that shard) are the agent's, ``agent ID`` (with the
    shard: ``agent ID, shard I/N``); the submitter's own lines (submitted, resubmitted, merged) are the service's.
    ``split(line)`` -> (source, message without the shard prefix)."""

    _SHARD = re.compile(r"\[shard ([0-9]+/[0-9]+)\] ")
    _RUNNING = re.compile(r"running on agent (\S+)")
    _SUBMITTER = ("submitted to ", "resubmitted ", "merged ")

    def __init__(self) -> None:
        self.agents: dict[str, str] = {}
        """Shard label ("" for an unsharded job) -> the agent running it."""

    def split(self, line: str) -> tuple[str, str]:
        shard = ""
        match = self._SHARD.match(line)
        if match:
            shard, line = match.group(1), line[match.end() :]
        running = self._RUNNING.match(line)
        if running:
            self.agents[shard] = running.group(1)
        agent = self.agents.get(shard)
        if agent is None or line.startswith(self._SUBMITTER):
            return (f"shard {shard}" if shard else SERVICE), line
        return (f"agent {agent}, shard {shard}" if shard else f"agent {agent}"), line

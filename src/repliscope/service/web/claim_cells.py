"""A claim verdict as the models pages show it next to the badge: the measured value, its 95 % interval and
the direction of the difference: "beats its claim" (the claim lies below the interval), "falls short" (above
it), "within its interval" (consistent). Accuracy-type claims only: every such metric is higher-is-better."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Direction = Literal["beats", "short", "within", "unjudged"]

DIRECTION_TEXT: dict[str, str] = {
    "beats": "beats its claim",
    "short": "falls short of its claim",
    "within": "within its interval",
    "unjudged": "not judged",
}
"""What each direction reads as on the page (its CSS class is ``direction-<key>``)."""


@dataclass(frozen=True)
class ClaimCell:
    """One claim of one run, its numbers in the metric's format (:mod:`repliscope.service.web.metric_format`):
    ``measured`` e.g. ``"90.00 %"``, ``interval`` e.g. ``"[69.90, 97.20] %"``, ``claimed`` e.g. ``"75.10 %"``;
    ``direction`` one of :data:`DIRECTION_TEXT`'s keys, ``text`` its words."""

    metric: str
    claimed: str
    measured: str
    interval: str
    verdict: str
    direction: Direction
    sampling: str | None = None
    """How the judged samples were chosen (``whole split``, ``random sample``, ``selection``); None when not
    judged or in an older record."""

    @property
    def text(self) -> str:
        return DIRECTION_TEXT[self.direction]

    @property
    def summary(self) -> str:
        """One line: ``top1 90.00 % [69.90, 97.20] % vs claimed 75.10 %: beats its claim``."""
        if self.measured == "—":
            return f"{self.metric}: not measured (claimed {self.claimed})"
        return f"{self.metric} {self.measured} {self.interval} vs claimed {self.claimed}: {self.text}"


def direction_of(claim: Mapping[str, Any]) -> Direction:
    """Where the claimed value lies against the measured interval: below it (the model ``beats`` its claim),
    above it (``short``), inside (``within``); ``unjudged`` when the verdict is "not comparable" or nothing was
    measured (the numbers are then shown, never presented as a reproduction)."""
    from repliscope.report.sections import shown_verdict

    low, high, claimed = claim.get("ci_low"), claim.get("ci_high"), claim.get("claimed")
    verdict, _ = shown_verdict(claim)  # a wide "consistent" of an older record is not judged
    if verdict not in ("consistent", "inconsistent") or low is None or high is None or claimed is None:
        return "unjudged"
    stored = claim.get("direction")  # as judged (a latency's is the other way round)
    if stored is not None:
        return "short" if stored == "falls short" else "beats" if stored == "beats" else "within"
    if claimed < low:
        return "beats"
    if claimed > high:
        return "short"
    return "within"


def claim_cell(claim: Mapping[str, Any]) -> ClaimCell:
    """A stored ``ClaimVerdict`` dump (a record's ``claims`` entry) as a :class:`ClaimCell`, its verdict as
    :func:`repliscope.report.sections.shown_verdict` shows it."""
    from repliscope.report.sections import shown_verdict
    from repliscope.service.web.metric_format import interval_text, value_text

    metric = str(claim.get("metric"))
    return ClaimCell(
        metric=metric,
        claimed=value_text(metric, claim.get("claimed")),
        measured=value_text(metric, claim.get("measured")),
        interval=interval_text(metric, claim.get("ci_low"), claim.get("ci_high")),
        verdict=shown_verdict(claim)[0],
        direction=direction_of(claim),
        sampling=claim.get("sampling"),
    )

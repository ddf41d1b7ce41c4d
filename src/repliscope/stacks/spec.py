"""A stack spec: a set of PEP 508 requirements for a runtime (``"onnxruntime==1.20.1 numpy<2"``), or ``current``.

Requirements are separated by whitespace (``"onnxruntime >= 1.20"`` is one requirement: a token that starts or
ends with an operator is joined to its neighbour). Only names from a package index are allowed: URLs, local
paths, editables and pip options are refused (a stack must be re-creatable from its spec on another machine).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from repliscope.errors import StackError
from repliscope.records.stack import CURRENT


@dataclass(frozen=True)
class StackSpec:
    """Canonical requirements: names normalised (PEP 503), specifiers sorted, requirements sorted by name.
    ``text`` is the canonical spec (equal for equivalent specs); ``current`` has no requirements."""

    requirements: tuple[str, ...]

    @property
    def is_current(self) -> bool:
        return not self.requirements

    @property
    def text(self) -> str:
        return " ".join(self.requirements) if self.requirements else CURRENT

    @property
    def names(self) -> tuple[str, ...]:
        """The canonical distribution names the spec constrains, e.g. ('numpy', 'onnxruntime')."""
        return tuple(canonicalize_name(Requirement(r).name) for r in self.requirements)

    def __str__(self) -> str:
        return self.text


_OPERATOR_EDGE = re.compile(r"^[<>=!~,;(]|[<>=!~,;(]$")
_PATHLIKE = re.compile(r"^[./~\\]|[/\\]|\.(whl|zip|tar\.gz|tgz|tar\.bz2)$", re.IGNORECASE)


def _tokens(text: str) -> list[str]:
    """Whitespace-separated requirements, re-joining a token that starts or ends with an operator."""
    out: list[str] = []
    for token in text.split():
        if out and (_OPERATOR_EDGE.search(token[:1]) or _OPERATOR_EDGE.search(out[-1][-1:])):
            out[-1] += token
        else:
            out.append(token)
    return out


def canonical_requirement(req: Requirement) -> str:
    """``Requirement`` -> canonical text: normalised name, sorted extras, specifiers sorted, marker kept."""
    text: str = canonicalize_name(req.name)
    if req.extras:
        text += "[" + ",".join(sorted(canonicalize_name(e) for e in req.extras)) + "]"
    if req.specifier:
        text += ",".join(sorted(str(s) for s in req.specifier))
    if req.marker is not None:
        text += f";{req.marker}"
    return text


def parse_spec(text: str) -> StackSpec:
    """``"onnxruntime==1.20.1 numpy<2"`` -> StackSpec; ``current`` -> this environment.

    Raises StackError naming the offending requirement: invalid PEP 508, a URL, a path or archive, an editable
    or other pip option, a name given twice, or an empty spec."""
    stripped = text.strip()
    if stripped.lower() == CURRENT:
        return StackSpec(())
    tokens = _tokens(stripped)
    if not tokens:
        raise StackError("empty stack spec: give pip requirements such as 'onnxruntime==1.20.1', or 'current'")
    by_name: dict[str, str] = {}
    for token in tokens:
        if token.startswith("-"):
            raise StackError(
                f"stack spec requirement '{token}': pip options (editables, indexes, files) are not "
                "allowed; give requirements such as 'onnxruntime==1.20.1'"
            )
        if "://" in token or "@" in token:
            raise StackError(
                f"stack spec requirement '{token}': URLs are not allowed (a stack must be "
                "re-creatable from the package index); give name==version"
            )
        if _PATHLIKE.search(token):
            raise StackError(
                f"stack spec requirement '{token}': local paths and archives are not allowed; give "
                "a distribution name with a version specifier, e.g. 'onnxruntime==1.20.1'"
            )
        try:
            req = Requirement(token)
        except InvalidRequirement as exc:
            raise StackError(f"stack spec requirement '{token}' is not a valid PEP 508 requirement: {exc}") from None
        name = canonicalize_name(req.name)
        if name in by_name:
            raise StackError(
                f"stack spec names '{name}' twice ('{by_name[name]}' and '{token}'): combine the "
                "specifiers in one requirement, e.g. 'numpy>=1.26,<2'"
            )
        by_name[name] = canonical_requirement(req)
    return StackSpec(tuple(by_name[n] for n in sorted(by_name)))

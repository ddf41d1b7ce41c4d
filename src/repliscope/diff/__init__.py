"""Differential testing: task-level (two runs or runtimes on the same samples) and layer-level (a candidate
implementation against the torch reference, golden and carried modes).

Importing this package imports no ML framework; candidates are registered lazily.
"""

from __future__ import annotations

from repliscope.backends import candidate_targets
from repliscope.diff.base import CANDIDATES, Candidate, LayerInfo

for _name, _target in candidate_targets().items():  # one entry per backend (repliscope.backends)
    CANDIDATES.add(_name, _target)
CANDIDATES.add("callable", "repliscope.diff.layers.callable_candidate:CallableCandidate")  # no framework of its own

__all__ = ["CANDIDATES", "Candidate", "LayerInfo"]

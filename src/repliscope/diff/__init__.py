"""Differential testing: task-level (two runs or runtimes on the same samples) and layer-level (a candidate
implementation against the torch reference, golden and carried modes).

Importing this package imports no ML framework; candidates are registered lazily.
"""

from __future__ import annotations

from repliscope.backends import candidate_targets
from repliscope.diff.base import CANDIDATES, Candidate, LayerInfo

for _name, _target in candidate_targets().items():  # one entry per backend (repliscope.backends)
    CANDIDATES.add(_name, _target)
FRAMEWORK_FREE_CANDIDATES = {"callable": "repliscope.diff.layers.callable_candidate:CallableCandidate"}
"""Candidates of no framework (a Python callable returning named arrays), registered here, not by a backend."""
for _name, _target in FRAMEWORK_FREE_CANDIDATES.items():
    CANDIDATES.add(_name, _target)

__all__ = ["CANDIDATES", "FRAMEWORK_FREE_CANDIDATES", "Candidate", "LayerInfo"]

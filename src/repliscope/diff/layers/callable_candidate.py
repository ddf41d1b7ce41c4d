"""A Python callable as a layer-diff candidate: ``--candidate FILE.py:NAME`` (or ``module:NAME``) where
``NAME(x)`` runs the user's model on the batch ``x`` and returns its named intermediate tensors, a dict
``name -> array`` in execution order.

``x`` is the reference's batch as the reference takes it (float32 NCHW for libdarknet, e.g. (N, 3, 416, 416));
the arrays may be numpy arrays or anything ``numpy.asarray`` reads (a TensorFlow eager tensor, a torch tensor:
detached first). Units are the dict's keys; a 4-D tensor in another layout is declared per pair in the mapping
file (``layout: NHWC``, :mod:`repliscope.diff.layers.pairs`).

The callable is the invoking user's own code named on their own command line (like ``python file.py``): it is
loaded by :func:`repliscope.user_code.load_user_object` (``manifest/code_refs.py``'s rules: public names only, no
module reached as an attribute; every failure one line naming ``--candidate``). The service never accepts one.

Only carried mode runs: a callable gives its tensors from its whole forward and cannot run one unit on given
inputs (golden mode is listed as not run, with that reason).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from repliscope.diff.layers.mapping import NamedCandidate, UnitInfo
from repliscope.errors import RepliscopeError

GOLDEN_LIMIT = (
    "a callable candidate returns its named tensors from its whole forward only; it cannot run one unit on the "
    "reference's inputs"
)


class CallableCandidate(NamedCandidate):
    """``fn(x) -> {name: array}`` (see the module docstring); ``spec`` the ``--candidate`` text."""

    name: ClassVar[str] = "callable"
    layout: ClassVar[str] = "NCHW"
    spans_gaps: ClassVar[bool] = False

    def __init__(self, fn: Any, spec: str) -> None:
        super().__init__()
        if not callable(fn):
            raise RepliscopeError(
                f"--candidate {spec}: '{spec.rpartition(':')[2]}' is a {type(fn).__name__}, not a callable"
            )
        self.fn, self.spec = fn, spec
        self.mode_limits = {"golden": GOLDEN_LIMIT}
        self._last: tuple[np.ndarray, dict[str, np.ndarray]] | None = None

    @classmethod
    def from_spec(cls, spec: str) -> CallableCandidate:
        from repliscope.user_code import load_user_object

        return cls(load_user_object(spec, "--candidate"), spec)

    def tensors(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """The callable's named tensors on ``x`` (the last call's, when ``x`` is the same batch)."""
        if self._last is not None and self._last[0] is x:  # the same batch object (held, so its id is not reused)
            return self._last[1]
        try:
            got = self.fn(x)
        except Exception as exc:  # the user's code: one line naming the flag
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise RepliscopeError(f"--candidate {self.spec}: the call failed: {type(exc).__name__}: {first}") from None
        if not isinstance(got, Mapping) or not got:
            raise RepliscopeError(
                f"--candidate {self.spec}: returned {type(got).__name__}, not a non-empty dict name -> array (its "
                "named intermediate tensors)"
            )
        out: dict[str, np.ndarray] = {}
        for key, value in got.items():
            if not isinstance(key, str):
                raise RepliscopeError(f"--candidate {self.spec}: tensor name {key!r} is not a string")
            if hasattr(value, "detach"):  # a torch tensor
                value = value.detach().cpu().numpy()
            array = np.asarray(value)
            if array.dtype.kind not in "fiu":
                raise RepliscopeError(f"--candidate {self.spec}: tensor '{key}' is {array.dtype}, not numbers")
            out[key] = array
        self._last = (x, out)
        return out

    def units(self, x: np.ndarray) -> list[UnitInfo]:
        self._units = [UnitInfo(k, "tensor", tuple(int(d) for d in v.shape)) for k, v in self.tensors(x).items()]
        return self._units

    def describe(self) -> dict[str, str]:
        return {"candidate": self.name, "source": self.spec}

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        raise RepliscopeError(f"golden mode: {GOLDEN_LIMIT}")

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        wanted = set(paths)
        tensors = self.tensors(x)
        unknown = sorted(wanted - set(tensors))
        if unknown:
            raise RepliscopeError(
                f"--candidate {self.spec}: returned no tensor named {', '.join(unknown)} (it returned: "
                f"{', '.join(tensors)})"
            )
        for name, value in tensors.items():
            if name in wanted:
                yield name, value

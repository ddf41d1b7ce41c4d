"""Unit-level differential testing: the contracts of the two sides of a diff, and the candidate registry.

Both sides are "something that runs named units": a :class:`Reference` names its units (:class:`LayerInfo`) and
runs its whole forward while handing out each unit's inputs and output; a :class:`Candidate` runs one unit on
given inputs (golden mode) and runs its whole forward yielding named unit outputs (carried mode). The one driver,
:func:`repliscope.diff.layers.driver.diff_layers`, compares any candidate with any reference: the torch module
(:class:`repliscope.diff.layers.torch_reference.TorchReference`, units named by module path,
``_blocks.3._depthwise_conv``) or another runtime, e.g. libdarknet
(:class:`repliscope.backends.darknet.reference.DarknetLayers`, units named after the Darknet layers,
``convolutional_0``).

A candidate is a second implementation of the same model (the ONNX export in onnxruntime, a Keras port with
converted weights, ...) that can run ONE mapped layer on given inputs (golden mode: every candidate layer gets
the REFERENCE input of that layer, so an error is attributed to the layer that makes it) and run its whole
forward pass while yielding mapped layer outputs in order (carried mode: shows how error grows).

All tensors crossing this interface are numpy arrays in the REFERENCE layout (torch: NCHW for images,
(N, F) for dense); a candidate converts to and from its own layout (e.g. NHWC) itself. A candidate that
cannot may set ``output_layout = "NHWC"``: the driver then transposes its 4-D outputs to NCHW before comparing
(and records that it did).

Layer paths: the n-th call (n >= 2) of a module called several times in one forward pass (e.g. one ReLU6
module applied twice per block) is named ``path#n`` (``_blocks.1._swish#2``); the first call is plain ``path``.

Functional ops: a torch function called directly in the ``forward`` of a container module (a residual
``x + y``, ``F.relu``, ``torch.matmul``, ``softmax``, ``flatten``) is a reference unit too, named
``<container path>/<op>`` (``layer1.0/add``, ``blocks.0.attn/softmax``; ``/flatten`` in the root module;
``layer1.0/relu#2`` for the second ``relu`` of that container call), with ``LayerInfo.op`` set. A candidate that
can run ops sets ``supports_ops = True``; for any other candidate the ops are listed as not compared (never as
passed).

CLI contract for a re-implementation in another framework (``repliscope diff MANIFEST --candidate PATH``):
the format word (detected or ``--candidate-format``) selects its loader in
:data:`repliscope.diff.layers.candidate_format.CANDIDATE_FORMATS`, which builds the class registered here under
that word (lazily: ``CANDIDATES.get("keras")``), e.g. ``cls.from_path(path, reference_module)`` with the torch
module built from the manifest (eval mode, weights loaded); the candidate is then paired with the reference
(the torch module: by file, name or a proposal; libdarknet: by Darknet layer name and
:mod:`repliscope.diff.layers.pairs`). The candidate is then compared with
:func:`repliscope.diff.layers.driver.diff_layers`. A candidate registered under a runtime name (``onnxruntime``) is a
:class:`RuntimeCandidate`, built as ``cls.from_artifact(artifact, cache_dir=..., threads=...)`` instead.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from repliscope.registry import Registry

if TYPE_CHECKING:
    from typing import Self

    from repliscope.diff.layers.layer_result import Cause
    from repliscope.runtimes.base import ModelArtifact


@dataclass(frozen=True)
class LayerInfo:
    """A reference layer: module ``path``, class ``kind``, ``source`` (file:line of the class definition)
    and ``reduction`` (the number of products summed per output element: conv ``in/groups*kh*kw``, linear
    ``in_features``; 1 for element-wise layers), which sets the tolerance.

    For a functional op unit: ``op`` is the op name (``add``, ``matmul``, ``softmax``; ``kind`` is the same),
    ``source`` the file:line of the call in ``forward`` and ``arity`` the number of activation tensors it reads
    (parameters, buffers and Python numbers excluded: ``x + y`` 2, ``attn * self.scale`` 1). Module layers
    have ``op == ""``."""

    path: str
    kind: str
    source: str
    reduction: int
    op: str = ""
    arity: int = 1
    producers: tuple[str, ...] = ()
    """The reference units whose outputs this unit reads, one per tensor input ("" for the model input or a
    tensor no unit produced), from the trace; empty when unknown."""
    type_name: str = ""
    """For a unit that is no functional op: the reference runtime's own name of its layer type when it has one
    besides ``kind`` (a Darknet layer's cfg section, ``convolutional``); recorded as the row's ``op``."""

    @property
    def is_op(self) -> bool:
        return bool(self.op)


@dataclass(frozen=True)
class Unmatched:
    """A reference unit (module layer or functional op) a candidate found no runnable counterpart for.

    ``missing``: the candidate has NO computation for it (a dropped residual add, a forgotten scale): a
    structural difference, reported as a divergence by the driver unless the reference op is an identity on
    the compared batch. Otherwise the unit could not be compared (e.g. fused in a way the driver cannot feed)
    and is only listed, with ``reason``."""

    path: str
    reason: str
    missing: bool = False


class Reference(ABC):
    """The reference side of a unit-level diff: any runtime that names its units and runs its whole forward
    handing out each unit's inputs and output (reference layout, numpy; copy what you keep)."""

    name: str

    notes: Sequence[str] = ()
    """What the result's notes say about the reference (first, before the candidate's)."""

    @abstractmethod
    def layers(self, example: np.ndarray) -> list[LayerInfo]:
        """The units, in the order they end, for inputs like ``example`` (a batch, reference layout)."""

    @abstractmethod
    def run(
        self,
        x: np.ndarray,
        on_start: Callable[[str, list[np.ndarray]], None] | None = None,
        on_end: Callable[[str, list[np.ndarray], np.ndarray], None] | None = None,
    ) -> np.ndarray | None:
        """Run the whole forward on ``x``, calling ``on_start(path, inputs)`` when unit ``path`` starts and
        ``on_end(path, inputs, output)`` when it ends (every unit of :meth:`layers`, in that order); returns the
        whole-model output, or None when the reference has no single one (then the output is not compared)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """The reference as the result records it (``framework`` first)."""

    def multi_output_ops(self, example: np.ndarray) -> list[LayerInfo]:
        """Units returning several tensors, which are not compared (listed with the reason). Default: none."""
        return []

    def explain(self, path: str, output: np.ndarray, candidate: np.ndarray) -> Cause | None:
        """A named cause that explains why the candidate's output of unit ``path`` differs from the reference's
        ``output`` (both in the reference layout), tested on the two arrays as the pipeline diff tests its
        pitfalls (libdarknet: a batch-norm convention); None when no known cause explains it. Called by the driver
        for diverging units only. Default: none known."""
        return None

    def stages(self, path: str, output: np.ndarray) -> list[tuple[str, np.ndarray]]:
        """The values unit ``path`` goes through, in order and ending with ``output``, as far as they follow from
        its output (a Darknet convolution: before its activation, then its output), named in words; the driver
        matches a diverging candidate unit's sub-layers against them to name the sub-layer that makes the error.
        Default: none known."""
        return []


class Candidate(ABC):
    """A second implementation, compared unit by unit with a :class:`Reference`."""

    name: ClassVar[str]

    @abstractmethod
    def mapped_layers(self, reference_layers: Sequence[LayerInfo]) -> list[str]:
        """The reference paths this candidate has a counterpart for, in execution order."""

    @abstractmethod
    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """Golden mode: run the counterpart of reference layer ``path`` on the reference ``inputs``."""

    @abstractmethod
    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        """Carried mode: run the whole model on ``x`` and yield (path, output) for each requested path, in
        execution order, without holding more than the current activations."""

    supports_ops: ClassVar[bool] = False
    """True when ``mapped_layers`` may return functional-op paths (``layer1.0/add``) and ``unmatched`` reports
    the ops it has no counterpart for."""

    output_layout: ClassVar[str] = "reference"
    """``"reference"`` (default: outputs already in the reference layout) or ``"NHWC"`` (4-D outputs are
    transposed to NCHW by the driver before comparison)."""

    mode_limits: Mapping[str, str] = MappingProxyType({})
    """Mode -> why this candidate cannot run it (absent = supported, the default: every mode); the driver runs
    the other modes and lists the reason, never skipping a mode silently. A candidate sets its own per instance."""

    notes: Sequence[str] = ()
    """What the candidate found while pairing its units with the reference (copied into the result's notes).
    A candidate sets its own list per instance."""

    def covers(self, path: str) -> list[str]:
        """The reference layers (in the order they start) that the counterpart of ``path`` computes at once,
        e.g. ``["_conv_stem", "_conv_stem.static_padding", "_bn0"]`` for an ONNX Conv with the padding and
        batch norm folded in. ``run_layer(path, ...)`` receives the inputs of the FIRST of them, and the
        tolerance uses the largest reduction among them. Default: ``[path]`` (one-to-one)."""
        return [path]

    def describe(self) -> dict[str, Any]:
        """The candidate as the result records it (``candidate`` first)."""
        return {"candidate": self.name}

    def sublayer_outputs(self, path: str, inputs: Sequence[np.ndarray]) -> list[tuple[str, np.ndarray]] | None:
        """Golden mode: the counterpart of ``path`` run on ``inputs`` sub-layer by sub-layer: (its name and class,
        e.g. ``convolutional_13 (LeakyReLU)``; its output in the reference layout) in call order; None when the
        candidate cannot tell. Default: None."""
        return None

    def input_sources(self, path: str) -> list[str] | None:
        """Golden mode: the reference units whose outputs the counterpart of ``path`` reads, one per tensor input
        in the order it reads them, as the CANDIDATE's own graph wires it ("" for the model input); None when the
        candidate cannot tell (then it is fed the reference's own inputs of ``path``). Default: None."""
        return None

    def unmatched(self) -> list[Unmatched]:
        """Reference units (from the last ``mapped_layers`` call) with no runnable counterpart, with the reason.
        Default: none reported (the driver lists every unmapped, uncovered unit as "not mapped")."""
        return []

    def output(self, x: np.ndarray) -> np.ndarray | None:
        """The candidate's whole-model output on ``x`` (reference layout), compared with the reference output;
        None when the candidate cannot produce it (the result then says the output was not compared).
        Default: None."""
        return None


class RuntimeCandidate(Candidate):
    """A candidate built from the manifest's model as a runtime runs it, registered under that runtime's name in
    :data:`CANDIDATES` (``repliscope diff MANIFEST --runtimes torch onnxruntime --layers``)."""

    @classmethod
    @abstractmethod
    def from_artifact(cls, artifact: ModelArtifact, *, cache_dir: Path, threads: int = 2) -> Self:
        """The candidate for ``artifact`` (the manifest's resolved model); ``cache_dir`` holds exports and
        conversions (e.g. the cached torch -> ONNX export)."""


def runtime_candidates() -> list[str]:
    """The runtimes that are also layer-diff candidates built from the manifest's model
    (:class:`RuntimeCandidate`)."""
    from repliscope.runtimes import RUNTIMES

    names = [n for n in CANDIDATES.names() if n in RUNTIMES]
    return [n for n in names if issubclass(CANDIDATES.get(n), RuntimeCandidate)]


CANDIDATES: Registry[type[Candidate]] = Registry("diff candidate")

"""Which kind of candidate ``--candidate X`` names, and building it with its layer mapping.

Formats (forced with ``--candidate-format``): one registry of loaders keyed by the format word,
:data:`CANDIDATE_FORMATS` (a new format is one :class:`CandidateFormat` entry and its loader; :data:`FORMATS` and
every error listing the formats read it). A loader returns a
:class:`~repliscope.diff.layers.mapping.NamedCandidate` that the reference's own pairing pairs (the torch
reference: below; libdarknet: :mod:`repliscope.diff.layers.pairs`), or a finished :class:`BuiltCandidate`.
Detection from ``X``: a ``.onnx`` / ``.tflite`` / ``.keras`` / tf_keras ``.h5`` file; a folder holding
``saved_model.pb`` (TensorFlow SavedModel; with ``keras_metadata.pb`` too, a tf_keras model) or ``mapping.yaml`` (a
Keras port), a ``.yaml`` mapping of a Keras port; ``module:function`` or ``file.py:function`` (a torch
re-implementation; for a darknet manifest, a ``callable`` returning named tensors). Anything else is an error that
lists the formats.

Mapping (reference path -> candidate unit name), in this order: ``--mapping FILE``; for a Keras port with its
conversion mapping, that mapping; for an ONNX file exported by ``torch.onnx.export(dynamo=True)``, its
``name_scopes`` metadata (any other ONNX file is run node by node: :mod:`repliscope.diff.layers.onnx_graph_candidate`);
for a candidate whose unit names include EVERY reference path (a torch port with the same module tree and
functional ops: each container calls the same ops in the same order), by name; otherwise a proposal by
:mod:`repliscope.diff.layers.auto_mapping`, printed (and written with ``--save-mapping``) so it can be checked and
edited.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from repliscope.diff.base import Candidate, Reference
from repliscope.errors import RepliscopeError
from repliscope.registry import Registry

if TYPE_CHECKING:
    from repliscope.diff.layers.layer_result import LayerDiffResult


@dataclass(frozen=True)
class LoadRequest:
    """What a candidate loader gets: the ``--candidate`` text ``spec``, the ``reference`` it will be compared with
    (a :class:`~repliscope.diff.base.Reference`: the torch module, libdarknet, ...), the probe batch ``x``
    (reference layout), the ``--mapping`` file, ``threads``, and ``pair``: the reference's way of pairing a
    :class:`~repliscope.diff.layers.mapping.NamedCandidate` with it (for a loader that wraps the paired
    candidate, e.g. in :class:`~repliscope.diff.layers.mapping.FixedBatch`); ``keras_file``: how a reference that
    is no torch module reads a ``.keras`` candidate (libdarknet's: with its ``DarknetYolo`` layer registered,
    :func:`repliscope.convert.darknet_candidate.load_keras_candidate`), given by whoever builds the request."""

    spec: str
    reference: Any
    x: np.ndarray
    mapping_file: Path | None
    threads: int
    fmt: str
    pair: Callable[[Any], BuiltCandidate]
    keras_file: Callable[[Path, Path | None], Any] | None = None

    @property
    def torch_reference(self) -> bool:
        return hasattr(self.reference, "module")


@dataclass(frozen=True)
class CandidateFormat:
    """One ``--candidate-format`` word: what it is (``description``, listed in errors and help) and its ``loader``
    (``"module:attr"``, ``(LoadRequest) -> NamedCandidate | BuiltCandidate``: a NamedCandidate is paired by the
    caller, a BuiltCandidate is final). ``references``: the references it can be compared with (``torch``,
    ``darknet``)."""

    word: str
    description: str
    loader: str
    references: tuple[str, ...] = ("torch", "darknet")

    def load(self, request: LoadRequest) -> Any:
        import importlib

        module, _, attr = self.loader.partition(":")
        return getattr(importlib.import_module(module), attr)(request)


CANDIDATE_FORMATS: Registry[CandidateFormat] = Registry("candidate format")
"""The candidate formats, keyed by the ``--candidate-format`` word: a new format is one entry here and its
loader (:class:`CandidateFormat`). :data:`FORMATS` and the errors listing the formats are read from it."""

_ENTRIES = (
    CandidateFormat("onnx", "an ONNX model file (.onnx), run in onnxruntime", f"{__name__}:_load_onnx"),
    CandidateFormat("tflite", "a TensorFlow Lite flatbuffer (.tflite)", f"{__name__}:_load_tflite"),
    CandidateFormat(
        "savedmodel", "a TensorFlow SavedModel folder (holding saved_model.pb)", f"{__name__}:_load_savedmodel"
    ),
    CandidateFormat(
        "keras",
        "a Keras port folder (model.py + mapping.yaml), its mapping .yaml, or a .keras file",
        f"{__name__}:_load_keras",
    ),
    CandidateFormat(
        "tf_keras",
        "a tf_keras (Keras 2) model: an .h5 file or a SavedModel folder written by tf_keras (keras_metadata.pb)",
        f"{__name__}:_load_tf_keras",
    ),
    CandidateFormat(
        "torch",
        "a Python factory module:function (or path/to/file.py:function) returning a torch.nn.Module",
        f"{__name__}:_load_torch",
        ("torch",),
    ),
    CandidateFormat(
        "callable",
        "a Python callable module:NAME (or path/to/file.py:NAME) returning named intermediate tensors "
        "(dict name -> array)",
        f"{__name__}:_load_callable",
        ("darknet",),
    ),
)
for _entry in _ENTRIES:
    CANDIDATE_FORMATS.add(_entry.word, _entry)

FORMATS: dict[str, str] = {
    name: CANDIDATE_FORMATS.get(name).description for name in [*(e.word for e in _ENTRIES), *CANDIDATE_FORMATS.names()]
}
"""``--candidate-format`` word -> what it is (from :data:`CANDIDATE_FORMATS`, the built-in ones in their order)."""
_FACTORY = re.compile(r"^(?:[A-Za-z_][\w.]*|.+\.py):[A-Za-z_][\w.]*$")


def formats_text() -> str:
    return "; ".join(f"{k}: {v}" for k, v in FORMATS.items())


def detect_format(candidate: str) -> str:
    """The format word for ``candidate`` (see the module docstring); RepliscopeError listing the formats."""
    from repliscope.backends.tensorflow.tf_keras_candidate import SUFFIXES, is_tf_keras_savedmodel

    path = Path(candidate)
    if path.is_dir():
        if is_tf_keras_savedmodel(path):
            return "tf_keras"
        if (path / "saved_model.pb").is_file():
            return "savedmodel"
        if (path / "mapping.yaml").is_file() or (path / "model.py").is_file():
            return "keras"
        raise RepliscopeError(
            f"candidate '{candidate}': a folder without saved_model.pb (SavedModel) or "
            f"mapping.yaml (Keras port); give --candidate-format or one of: {formats_text()}"
        )
    if path.is_file():
        by_suffix = {".onnx": "onnx", ".tflite": "tflite", ".keras": "keras", ".yaml": "keras", ".yml": "keras"}
        by_suffix.update(dict.fromkeys(SUFFIXES, "tf_keras"))
        found = by_suffix.get(path.suffix.lower())
        if found is None:
            raise RepliscopeError(
                f"candidate '{candidate}': cannot tell the format of a "
                f"'{path.suffix or 'suffix-less'}' file; give --candidate-format "
                f"{'|'.join(FORMATS)} ({formats_text()})"
            )
        return found
    if _FACTORY.match(candidate) and not candidate.endswith((".onnx", ".tflite", ".keras")):
        return "torch"
    raise RepliscopeError(
        f"candidate '{candidate}': no such file or folder, and not a module:function factory "
        f"(give one of: {formats_text()})"
    )


def check_format(name: str) -> str:
    if name not in FORMATS:
        raise RepliscopeError(f"unknown --candidate-format '{name}' (allowed: {', '.join(FORMATS)})")
    return name


@dataclass
class BuiltCandidate:
    """The candidate to diff, the format, how its mapping was obtained (``by file``, ``by name``,
    ``proposed``, ``port mapping``, ``onnx metadata``), the mapping itself when it is a name mapping, and the
    proposal details (unpaired candidate units, uncovered reference layers)."""

    candidate: Candidate
    format: str
    mapping_origin: str
    mapping: dict[str, str] = field(default_factory=dict)
    unpaired_candidate: list[str] = field(default_factory=list)
    uncovered_reference: list[str] = field(default_factory=list)
    ops: dict[str, str] = field(default_factory=dict)
    uncovered_reasons: dict[str, str] = field(default_factory=dict)
    """Reference layers the proposal left out on purpose (no candidate unit in execution order) -> why."""


def load_candidate(request: LoadRequest) -> Any:
    """The ``request.fmt`` loader's candidate: a NamedCandidate to pair, or a final BuiltCandidate."""
    entry = CANDIDATE_FORMATS.get(check_format(request.fmt))
    kind = "torch" if request.torch_reference else "darknet"
    if kind not in entry.references:
        others = [n for n in FORMATS if kind in CANDIDATE_FORMATS.get(n).references]
        raise RepliscopeError(
            f"--candidate {request.spec}: a {request.fmt} candidate is compared with a "
            f"{' or '.join(entry.references)} reference, not the {kind} one (give one of: {', '.join(others)})"
        )
    return entry.load(request)


def build_candidate(
    fmt: str, candidate: str, reference: Any, x: np.ndarray, *, mapping_file: Path | None = None, threads: int = 2
) -> BuiltCandidate:
    """Build the ``fmt`` candidate from ``candidate`` and pair it with ``reference`` (a TorchReference) on the
    probe batch ``x`` (reference layout, e.g. float32 NCHW (N, 3, 224, 224))."""

    def pair(inner: Any) -> BuiltCandidate:
        return _pair(inner, candidate, fmt, reference, x, mapping_file)

    loaded = load_candidate(LoadRequest(candidate, reference, x, mapping_file, threads, fmt, pair))
    return loaded if isinstance(loaded, BuiltCandidate) else pair(loaded)


def _load_onnx(request: LoadRequest) -> Any:
    from repliscope.diff import CANDIDATES
    from repliscope.diff.layers.mapping import FixedBatch
    from repliscope.diff.layers.onnx_graph_candidate import OnnxGraphCandidate

    path = Path(request.spec)
    if not request.torch_reference:
        return _darknet_onnx(request)
    try:
        cls: Any = CANDIDATES.get("onnx")
        inner: Any = cls(path, threads=request.threads, source=str(request.spec))
    except RepliscopeError:
        raise
    except Exception as exc:  # protobuf / onnx decode errors of a file that is not an ONNX model
        raise RepliscopeError(f"ONNX candidate '{request.spec}' cannot be read: {type(exc).__name__}: {exc}") from None
    # an ONNX file exported with scopes names the reference layers itself
    fixed = _onnx_fixed_batch(path, int(request.x.shape[0]))
    if request.mapping_file is None and inner.mapped_layers(request.reference.layers(request.x)):
        return BuiltCandidate(FixedBatch(inner, fixed) if fixed else inner, request.fmt, "onnx metadata")
    graph = OnnxGraphCandidate(path, threads=request.threads)  # paired by --mapping or a proposal
    if not fixed:
        return graph
    built = request.pair(graph)
    built.candidate = FixedBatch(built.candidate, fixed)
    return built


def _darknet_onnx(request: LoadRequest) -> Any:
    """An ONNX file against libdarknet: its nodes as units (:class:`OnnxGraphCandidate`), paired by Darknet layer
    name (a tensor named ``convolutional_0``, as repliscope's and most Darknet converters name them) or
    ``--mapping``; an input batch fixed at another size than the diff's is refused with the size to give."""
    from repliscope.diff.layers.onnx_graph_candidate import OnnxGraphCandidate

    graph = OnnxGraphCandidate(Path(request.spec), threads=request.threads)  # an unreadable file: one error
    fixed = _onnx_fixed_batch(Path(request.spec), int(request.x.shape[0]))
    if fixed:
        raise RepliscopeError(
            f"--candidate {request.spec}: the ONNX model's input has a fixed batch of {fixed}; a diff against "
            f"libdarknet runs one batch of the first samples: give --limit {fixed}"
        )
    return graph


def _load_tflite(request: LoadRequest) -> Any:
    from repliscope.diff import CANDIDATES

    cls: Any = CANDIDATES.get("tflite")
    return cls(Path(request.spec), threads=request.threads)


def _load_savedmodel(request: LoadRequest) -> Any:
    from repliscope.diff import CANDIDATES

    cls: Any = CANDIDATES.get("savedmodel")
    return cls(Path(request.spec), threads=request.threads)


def _load_keras(request: LoadRequest) -> Any:
    from repliscope.backends.keras.candidate import KerasLayersCandidate
    from repliscope.diff import CANDIDATES

    path = Path(request.spec)
    if not request.torch_reference:
        if request.keras_file is None:
            raise RepliscopeError(f"--candidate {path}: a .keras candidate needs a torch or a libdarknet reference")
        return request.keras_file(path, request.mapping_file)
    cls: Any = CANDIDATES.get("keras")
    if request.mapping_file is None and _has_port_mapping(path):
        return BuiltCandidate(cls.from_path(path, request.reference.module), request.fmt, "port mapping")
    if path.suffix.lower() == ".keras":
        return KerasLayersCandidate.from_file(path)
    port = cls.from_path(path, request.reference.module)  # a port under --mapping: built, converted, paired by names
    return KerasLayersCandidate(port.model, source=port.source)


def _load_tf_keras(request: LoadRequest) -> Any:
    from repliscope.diff import CANDIDATES

    cls: Any = CANDIDATES.get("tf_keras")
    return cls.from_path(Path(request.spec))


def _load_torch(request: LoadRequest) -> Any:
    from repliscope.diff import CANDIDATES

    cls: Any = CANDIDATES.get("torch")
    return cls.from_path(request.spec, request.reference.module)


def _load_callable(request: LoadRequest) -> Any:
    from repliscope.diff import CANDIDATES

    cls: Any = CANDIDATES.get("callable")
    return cls.from_spec(request.spec)


def _onnx_fixed_batch(path: Path, n: int) -> int:
    """The fixed batch size of the ONNX model's input when it differs from ``n`` (0 when the batch axis is
    dynamic or already ``n``)."""
    from repliscope.runtimes._common import onnx_fixed_batch

    fixed = onnx_fixed_batch(path)
    return fixed if fixed > 0 and fixed != n else 0


def _pair(
    inner: Any, candidate: str, fmt: str, reference: Any, x: np.ndarray, mapping_file: Path | None
) -> BuiltCandidate:
    """Pair a :class:`~repliscope.diff.layers.mapping.NamedCandidate` with the reference: ``mapping_file``, else by
    name, else a proposal (see the module docstring)."""
    from repliscope.diff.layers.auto_mapping import covers_for, propose, reference_units, shifted_containers
    from repliscope.diff.layers.mapping import MappedCandidate, load_mapping

    units = inner.units(x)
    names = [u.name for u in units]
    ref_paths = [layer.path for layer in reference.layers(x)]
    if mapping_file is not None:
        mapping = load_mapping(mapping_file)
        spans = inner.spans_gaps or "golden" in inner.mode_limits
        covers = covers_for(ref_paths, [p for p in ref_paths if p in mapping]) if spans else {}
        mapped = MappedCandidate(inner, mapping, names, covers=covers, origin=f"from {mapping_file}")
        return BuiltCandidate(mapped, fmt, "by file", mapping, ops={u.name: u.op for u in units})
    same = {p: p for p in ref_paths if p in set(names)}
    if len(same) == len(ref_paths) and not shifted_containers(ref_paths, names):
        # every reference unit has a namesake and every container calls the same ops (a port with the same tree)
        mapped = MappedCandidate(inner, same, names, origin="by name")
        return BuiltCandidate(mapped, fmt, "by name", same, ops={u.name: u.op for u in units})
    proposal = propose(reference_units(reference, x), units, inner.layout)
    if not proposal.mapping:
        raise RepliscopeError(
            f"candidate '{candidate}': no unit could be paired with a reference layer (output "
            "shapes differ everywhere); write a mapping and pass --mapping FILE"
        )
    mapped = MappedCandidate(inner, proposal.mapping, names, covers=proposal.covers, origin="proposed")
    return BuiltCandidate(
        mapped,
        fmt,
        "proposed",
        proposal.mapping,
        proposal.unmatched_candidate,
        proposal.uncovered_reference,
        proposal.ops,
        dict(proposal.reasons),
    )


def diff_candidate(
    reference: Reference,
    candidate: Candidate,
    x: np.ndarray,
    modes: Sequence[str],
    tolerance: Any = None,
    samples: Sequence[str] = (),
    built: BuiltCandidate | None = None,
) -> LayerDiffResult:
    """:func:`~repliscope.diff.layers.driver.diff_layers` over the requested ``modes`` the candidate can run; a mode it
    cannot (``mode_limits``) is listed first in ``notes`` with the reason (RepliscopeError when none is left).
    ``built`` adds the format, how the mapping was obtained and the pairs to ``result.candidate``."""
    from repliscope.diff.layers.driver import diff_layers

    limits = dict(candidate.mode_limits)
    run_modes = [m for m in modes if m not in limits]
    if not run_modes:
        raise RepliscopeError("; ".join(f"{m} mode is not possible for this candidate: {limits[m]}" for m in modes))
    result = diff_layers(
        reference,
        candidate,
        x,
        modes=run_modes,  # type: ignore[arg-type]
        tolerance=tolerance,
        samples=samples,
    )
    extra = [f"{m} mode not run: {limits[m]}" for m in modes if m in limits]
    if built is not None:
        result.candidate = {**result.candidate, "format": built.format, "mapping_origin": built.mapping_origin}
        if built.mapping:
            result.candidate["pairs"] = dict(built.mapping)
        if built.mapping_origin == "proposed":
            result.candidate["unpaired_candidate_units"] = built.unpaired_candidate
            for item in result.uncompared:  # left out by the proposal: say why instead of "maps no unit to it"
                if item.path in built.uncovered_reasons:
                    item.reason = f"the proposed mapping left it uncovered: {built.uncovered_reasons[item.path]}"
            extra.append(
                f"the layer mapping was PROPOSED by alignment ({len(built.mapping)} pairs, "
                f"{len(built.unpaired_candidate)} candidate units unpaired): check it "
                "(--save-mapping FILE), edit it and pass it back with --mapping FILE"
            )
    result.notes = extra + list(result.notes)
    return result


def _has_port_mapping(path: Path) -> bool:
    if path.is_dir() or path.suffix.lower() in (".yaml", ".yml"):
        return True
    return path.with_suffix(".mapping.yaml").is_file() or (path.parent / "mapping.yaml").is_file()

"""A layer-level diff of a MANIFEST's model, as ``repliscope diff MANIFEST --layers`` runs it (and the API can):
which comparison the runtimes and the candidate select, the batch of real samples, the reference and the
candidate, then the diff itself. The command line only parses options and prints.

* ``--runtimes darknet onnxruntime|keras``: libdarknet against repliscope's ONNX conversion or Keras port
  (:func:`repliscope.convert.darknet_verify.manifest_layer_diff`);
* a ``candidate`` without runtimes on a darknet source: libdarknet against that Keras port file
  (:func:`repliscope.convert.darknet_candidate.manifest_candidate_diff`);
* ``--runtimes onnxruntime opencv_dnn`` (:data:`RUNTIME_LAYER_PAIRS`): the two runtimes node by node on the
  manifest's ONNX graph(s) (:mod:`repliscope.diff.layers.runtime_layers`);
* otherwise the torch reference against a runtime candidate (:class:`~repliscope.diff.base.RuntimeCandidate`,
  default ``onnxruntime``) or a re-implementation given as ``candidate`` (a file, a folder or a torch factory,
  :mod:`repliscope.diff.layers.candidate_format`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from repliscope.errors import RepliscopeError

if TYPE_CHECKING:
    from repliscope.diff.base import Candidate
    from repliscope.diff.layers.candidate_format import BuiltCandidate
    from repliscope.diff.layers.layer_result import LayerDiffResult
    from repliscope.evaluation.run import PreparedRun

MODES: dict[str, list[str]] = {"golden": ["golden"], "carried": ["carried"], "both": ["golden", "carried"]}
"""``--mode`` -> the layer-diff modes it runs."""

RUNTIME_LAYER_PAIRS = {"onnxruntime": "opencv_dnn"}
"""Reference runtime -> candidate runtime of the node-by-node diff on one ONNX graph."""

DARKNET_PAIRS = (("darknet", "onnxruntime"), ("darknet", "keras"))
"""libdarknet against repliscope's conversions, layer by layer."""


@dataclass(frozen=True)
class LayerDiffOptions:
    """What a manifest layer diff compares and how: ``runtimes`` (reference, candidate), ``candidate`` (a
    re-implementation, see the module docstring) with its ``candidate_format`` (None: detected) and ``mapping``
    file; ``dataset`` (a registered name or an image folder) and ``batch`` (samples in the batch); ``mode``
    (golden | carried | both); ``tolerance_k`` (None: the default policy); ``threads``; ``opencv_engine`` (new |
    classic) of the node-by-node diff."""

    runtimes: tuple[str, str] | None = None
    candidate: str | None = None
    candidate_format: str | None = None
    mapping: Path | None = None
    dataset: str = "foolbox_imagenet"
    batch: int = 8
    mode: str = "both"
    tolerance_k: float | None = None
    threads: int = 2
    opencv_engine: str = "new"


@dataclass(frozen=True)
class CandidateHooks:
    """Calls around building a re-implementation candidate: ``on_format(fmt)`` before it is built (e.g. to
    import Keras quietly), ``on_candidate(built)`` once built and paired, before the diff runs (e.g. to show or
    save a proposed mapping)."""

    on_format: Callable[[str], None] | None = None
    on_candidate: Callable[[BuiltCandidate], None] | None = None


def manifest_layer_diff(
    manifest: Path, options: LayerDiffOptions, hooks: CandidateHooks | None = None
) -> LayerDiffResult:
    """The layer-level diff of ``manifest`` the options select (see the module docstring); ``hooks``: see
    :class:`CandidateHooks`."""
    if options.mode not in MODES:
        raise RepliscopeError(f"--mode must be golden, carried or both, not '{options.mode}'")
    modes = MODES[options.mode]
    runtimes = options.runtimes
    if runtimes is None and options.candidate is None:
        check_torch_source(manifest)
    if is_darknet_candidate_diff(manifest, options):
        from repliscope.convert.darknet_candidate import manifest_candidate_diff
        from repliscope.datasets import resolve_dataset

        assert options.candidate is not None
        darknet: LayerDiffResult = manifest_candidate_diff(
            manifest,
            resolve_dataset(options.dataset),
            options.batch,
            options.candidate,
            candidate_format=options.candidate_format,
            mapping_file=options.mapping,
            modes=tuple(modes),
            threads=options.threads,
            tolerance=None if options.tolerance_k is None else _policy(options.tolerance_k),
        )
        return darknet
    if runtimes in DARKNET_PAIRS:
        from repliscope.convert.darknet_verify import manifest_layer_diff as darknet_layer_diff
        from repliscope.datasets import resolve_dataset

        assert runtimes is not None
        result: LayerDiffResult = darknet_layer_diff(
            manifest,
            resolve_dataset(options.dataset),
            options.batch,
            modes=tuple(modes),
            threads=options.threads,
            tolerance=None if options.tolerance_k is None else _policy(options.tolerance_k),
            candidate="onnx" if runtimes[1] == "onnxruntime" else "keras",
        )
        return result
    if runtimes is not None and runtimes[0] in RUNTIME_LAYER_PAIRS:
        return _runtime_layers(manifest, options, modes)
    return _torch_layers(manifest, options, modes, hooks or CandidateHooks())


def is_darknet_candidate_diff(manifest: Path, options: LayerDiffOptions) -> bool:
    """A re-implementation given without runtimes on a darknet source: compared with libdarknet, paired by Darknet
    layer name (or a mapping file), never by a proposed mapping."""
    if options.candidate is None or options.runtimes is not None:
        return False
    from repliscope.manifest.loader import load_manifest

    return str(load_manifest(manifest).manifest.source.format) == "darknet"


def _policy(k: float | None) -> Any:
    from repliscope.diff.tolerance import TolerancePolicy

    return TolerancePolicy() if k is None else TolerancePolicy(k=k)


def check_torch_source(manifest: Path) -> None:
    """``--layers`` alone compares with the torch reference: refuse a manifest whose model is no torch source."""
    from repliscope.manifest.loader import load_manifest

    fmt = load_manifest(manifest).manifest.source.format
    if fmt != "pytorch_state_dict":
        pairs = " or ".join(f"--runtimes {a} {b}" for a, b in RUNTIME_LAYER_PAIRS.items())
        raise RepliscopeError(
            f"--layers compares with the torch reference by default, and this manifest's model "
            f"is a '{fmt}' source, not torch: compare two runtimes node by node on its ONNX "
            f"graph with {pairs} --layers"
        )


def check_layer_runtimes(runtimes: tuple[str, str], candidate: str | None, candidate_format: str | None) -> None:
    """Refuse a runtime pair (and candidate) a layer diff cannot compare, before any work."""
    from repliscope.diff.base import runtime_candidates
    from repliscope.diff.layers.candidate_format import FORMATS
    from repliscope.runtimes import RUNTIMES

    ref, cand = runtimes
    if ref == "darknet" and cand in ("onnxruntime", "keras"):
        if candidate is not None:
            raise RepliscopeError(
                f"--runtimes darknet {cand} --layers compares libdarknet with repliscope's "
                f"{'ONNX conversion' if cand == 'onnxruntime' else 'Keras port'} layer by layer: "
                "no --candidate"
            )
        return
    if RUNTIME_LAYER_PAIRS.get(ref) == cand:
        if candidate is not None:
            raise RepliscopeError(
                f"--runtimes {ref} {cand} --layers compares the two runtimes node by node on the "
                "manifest's ONNX graph: no --candidate (a re-implementation is compared with the "
                "torch reference)"
            )
        return
    if ref != "torch":
        other = ref if cand == "torch" else cand
        pairs = ", ".join(f"{a} {b}" for a, b in RUNTIME_LAYER_PAIRS.items())
        raise RepliscopeError(
            f"the layer-level reference must be torch (--runtimes torch {other}), not '{ref}' "
            f"(runtime pairs on one ONNX graph: --runtimes {pairs})"
        )
    if candidate is not None:
        from repliscope.diff.layers.candidate_format import check_format, detect_format

        fmt = check_format(candidate_format) if candidate_format else detect_format(candidate)
        if cand != fmt:
            raise RepliscopeError(
                f"--candidate {candidate} is a {fmt} candidate: give --runtimes torch {fmt} or "
                f"leave --runtimes out (not '{cand}')"
            )
        return
    if cand in FORMATS and cand not in runtime_candidates():
        raise RepliscopeError(
            f"a {cand} candidate is a re-implementation, not a runtime: give --candidate X ({FORMATS[cand]})"
        )
    if cand not in runtime_candidates():
        allowed = ", ".join(runtime_candidates())
        known = (
            f"'{cand}' is a runtime without layer-by-layer execution"
            if cand in RUNTIMES
            else f"unknown layer-diff candidate '{cand}'"
        )
        raise RepliscopeError(
            f"{known} (allowed: {allowed}; a re-implementation as a {', '.join(FORMATS)} "
            "candidate: --candidate X [--candidate-format F])"
        )


def _runtime_layers(manifest: Path, options: LayerDiffOptions, modes: list[str]) -> LayerDiffResult:
    from repliscope.datasets import resolve_dataset
    from repliscope.diff.layers.runtime_layers import diff_runtime_graphs, manifest_graphs

    graphs, ids = manifest_graphs(manifest, resolve_dataset(options.dataset), options.batch, threads=options.threads)
    return diff_runtime_graphs(
        graphs,
        engine=options.opencv_engine,
        modes=modes,  # type: ignore[arg-type]
        tolerance=_policy(options.tolerance_k),
        threads=options.threads,
        samples=ids,
    )


def _torch_layers(
    manifest: Path,
    options: LayerDiffOptions,
    modes: list[str],
    hooks: CandidateHooks,
) -> LayerDiffResult:
    from repliscope.datasets import resolve_dataset
    from repliscope.diff.layers.candidate_format import diff_candidate
    from repliscope.diff.layers.torch_reference import TorchReference
    from repliscope.diff.task_level import first_batch
    from repliscope.evaluation.run import RunSettings, prepare

    runtimes, threads, batch = options.runtimes, options.threads, options.batch
    cand_name = runtimes[1] if runtimes else "onnxruntime"  # the reference is torch (check_layer_runtimes)
    prepared = prepare(manifest, RunSettings(runtime="torch", threads=threads, batch_size=batch))
    reference = TorchReference.from_artifact(prepared.artifact)
    shape = tuple(prepared.artifact.input_shape[1:])
    ids, x = first_batch(prepared.pipeline, resolve_dataset(options.dataset), batch, shape)
    built = _built_candidate(reference, x, options, hooks)
    if built is not None and hooks.on_candidate is not None:
        hooks.on_candidate(built)
    cand = built.candidate if built is not None else _runtime_candidate(prepared, cand_name, threads)
    return diff_candidate(reference, cand, x, modes, _policy(options.tolerance_k), ids, built)


def _built_candidate(reference: Any, x: Any, options: LayerDiffOptions, hooks: CandidateHooks) -> BuiltCandidate | None:
    """The ``candidate`` re-implementation paired with the reference, or None for a runtime candidate."""
    if options.candidate is None:
        return None
    from repliscope.diff.layers.candidate_format import build_candidate, detect_format

    fmt = options.candidate_format or detect_format(options.candidate)
    if hooks.on_format is not None:
        hooks.on_format(fmt)
    return build_candidate(fmt, options.candidate, reference, x, mapping_file=options.mapping, threads=options.threads)


def _runtime_candidate(prepared: PreparedRun, name: str, threads: int) -> Candidate:
    from repliscope.diff.base import CANDIDATES, RuntimeCandidate
    from repliscope.paths import default_cache_dir

    cls = CANDIDATES.get(name)
    if not issubclass(cls, RuntimeCandidate):  # check_layer_runtimes allows runtime_candidates() only
        raise RepliscopeError(f"'{name}' is no runtime candidate")
    return cls.from_artifact(
        prepared.artifact, cache_dir=prepared.settings.cache_dir or default_cache_dir(), threads=threads
    )

"""``repliscope diff MANIFEST --candidate X --layers`` for a darknet manifest: ANY re-implementation compared layer by
layer with libdarknet.

The reference is libdarknet's every-layer output (``net->layers[i].output``) on the manifest's pre-processed
samples (:class:`~repliscope.backends.darknet.reference.DarknetLayers`). The candidate is loaded by its format's
loader (:data:`repliscope.diff.layers.candidate_format.CANDIDATE_FORMATS`, the one registry): a Keras 3 ``.keras``
file (e.g. the one ``repliscope convert MANIFEST --to keras`` wrote; nothing rebuilt from the ``.cfg``: a bug in the
file is what is measured), a tf_keras model (``.h5`` or a SavedModel folder written by tf_keras, its sub-layers
addressed by path ``backbone/conv_0/bn``), a TensorFlow SavedModel (graph operations), a TFLite file, or a Python
callable ``FILE.py:NAME`` returning named intermediate tensors, or an ONNX file (your own conversion, its nodes as
units: :class:`~repliscope.diff.layers.onnx_graph_candidate.OnnxGraphCandidate`; repliscope's own conversion is
also compared with ``--runtimes darknet onnxruntime --layers``).

Pairing (:mod:`repliscope.diff.layers.pairs`): each Darknet layer with the candidate unit of the same name, and
``--mapping FILE`` (``darknet_layer: unit`` or ``darknet_layer: {unit, activation, layout, scale}``) for the others;
a Darknet layer left without a unit is skipped with a note (TFMG's model has no layer for yolo, route, upsample).

- **golden**: each paired unit called on libdarknet's outputs of the layers it reads (a Keras ``.keras`` unit: its
  named layer plus the unnamed layers before it back to the previous paired one: ``convolutional_2_pad`` +
  ``convolutional_2_conv`` + ``convolutional_2``);
- **carried**: the candidate's whole forward, every paired unit's output streamed.

A convolutional layer with batch norm that diverges is checked against the batch-norm conventions
(:meth:`~repliscope.backends.darknet.reference.DarknetLayers.explain`): the result names the one that explains it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.backends.darknet.reference import DarknetLayers, layer_sources
from repliscope.convert.darknet_cfg import Network, load_network_cfg
from repliscope.convert.darknet_verify import diff_darknet
from repliscope.diff.layers.layer_result import LayerDiffResult
from repliscope.diff.layers.mapping import MappingError, NamedCandidate
from repliscope.diff.layers.pairs import Pair, PairedCandidate, declared_pairs, load_pairs, pair_layers
from repliscope.diff.tolerance import TolerancePolicy
from repliscope.errors import RepliscopeError


def candidate_formats() -> list[str]:
    """What ``--candidate`` can be for a darknet manifest: the formats whose loader takes a darknet reference."""
    from repliscope.diff.layers.candidate_format import CANDIDATE_FORMATS, FORMATS

    return [n for n in FORMATS if "darknet" in CANDIDATE_FORMATS.get(n).references]


def load_keras_candidate(path: Path, mapping_file: Path | None = None) -> NamedCandidate:
    """The ``.keras`` file as a candidate (its ``DarknetYolo`` layer class registered by importing
    :mod:`repliscope.convert.darknet_keras`): its top-level layers
    (:class:`~repliscope.backends.keras.candidate.KerasLayersCandidate`), or every layer and sub-layer by path
    (:class:`~repliscope.backends.keras.candidate.KerasNestedCandidate`) when the mapping names a nested path."""
    import repliscope.convert.darknet_keras  # noqa: F401  (registers its DarknetYolo layer with Keras)
    from repliscope.backends.keras.candidate import KerasLayersCandidate, KerasNestedCandidate, check_port_path

    path = check_port_path(path)
    if path.suffix.lower() != ".keras":
        raise RepliscopeError(
            f"--candidate {path}: a darknet manifest's Keras candidate is a .keras file "
            "(repliscope convert MANIFEST --to keras --out FILE.keras)"
        )
    flat = KerasLayersCandidate.from_file(path)
    if mapping_file is not None and any("/" in u for p in declared_pairs(mapping_file).values() for u in p.units):
        return KerasNestedCandidate(flat.model, flat.keras, source=str(path))
    return flat


def darknet_candidate(
    fmt: str,
    spec: str,
    reference: DarknetLayers,
    x: np.ndarray,
    *,
    mapping_file: Path | None = None,
    pairs: Mapping[str, Pair] | None = None,
    threads: int = 1,
) -> PairedCandidate:
    """The ``fmt`` candidate ``spec`` paired with libdarknet's layers (``pairs``, or read from ``mapping_file``;
    else by name), on the probe batch ``x`` (float32 NCHW)."""
    from repliscope.diff.layers.candidate_format import BuiltCandidate, LoadRequest, load_candidate

    allowed = candidate_formats()
    if fmt not in allowed:
        raise RepliscopeError(
            f"--candidate {spec} is a {fmt} candidate; a darknet manifest's --candidate is compared with "
            f"libdarknet and can be: {', '.join(allowed)} (e.g. a .keras file from repliscope convert MANIFEST "
            "--to keras, or your own .onnx file)"
        )
    names = [lay.name for lay in reference.network.layers]
    through = passthroughs(reference.network)
    if pairs is not None:
        declared: dict[str, Pair] | None = dict(pairs)
    else:
        declared = load_pairs(mapping_file, names, through) if mapping_file else None

    def no_pairing(inner: Any) -> BuiltCandidate:  # pragma: no cover - only the torch-reference loaders call it
        raise RepliscopeError(f"a {fmt} candidate of a darknet manifest is paired by Darknet layer name")

    request = LoadRequest(spec, reference, x, mapping_file, threads, fmt, no_pairing, keras_file=load_keras_candidate)
    inner = load_candidate(request)
    if not isinstance(inner, NamedCandidate):
        raise RepliscopeError(f"a {fmt} candidate cannot be paired with libdarknet's layers")
    units = [u.name for u in inner.units(x[:1])]
    pairing = pair_layers(names, units, declared, str(mapping_file or spec), through)
    paired, skipped = pairing.pairs, pairing.skipped
    renamed = {n: p.unit for n, p in paired.items() if n != p.unit}
    info: dict[str, Any] = {
        **inner.describe(),
        "candidate": inner.name,
        "format": fmt,
        "source": str(spec),
        "mapping_origin": "from --mapping" if declared is not None else "by Darknet layer name",
    }
    if renamed:
        info["pairs"] = renamed
    transforms = {n: p.transform for n, p in paired.items() if p.transform}
    if transforms:
        info["transforms"] = transforms
    if skipped:
        info["skipped"] = skipped
    if pairing.shared:
        info["shared"] = pairing.shared
    producers = {lay.path: lay.producers for lay in reference.layers(x[:1])}
    notes = _describe_notes(fmt, spec, inner)
    return PairedCandidate(inner, paired, names, info, notes, skipped, producers, pairing.shared)


def passthroughs(network: Network) -> dict[str, str]:
    """Darknet layer -> the layer whose output it passes on unchanged: a ``route`` with one input."""
    found: dict[str, str] = {}
    for lay in network.layers:
        sources = layer_sources(lay)
        if lay.type == "route" and len(sources) == 1 and sources[0] >= 0:
            found[lay.name] = network.layers[sources[0]].name
    return found


def _describe_notes(fmt: str, spec: str, inner: NamedCandidate) -> list[str]:
    if fmt == "keras":
        import keras

        return [
            f"candidate: the Keras port file {spec} (Keras {keras.__version__}, backend "
            f"{keras.backend.backend()}, NHWC), loaded as saved"
        ]
    return [f"candidate: the {fmt} candidate {spec} (computing in {inner.layout} unless a pair declares its layout)"]


def verify_candidate(
    cfg: Path,
    weights: Path,
    images: np.ndarray,
    spec: str,
    fmt: str,
    *,
    mapping_file: Path | None = None,
    pairs: Mapping[str, Pair] | None = None,
    modes: tuple[str, ...] = ("golden", "carried"),
    tolerance: TolerancePolicy | None = None,
    threads: int = 1,
    samples: list[str] | None = None,
    reference_outputs: list[dict[str, np.ndarray]] | None = None,
) -> LayerDiffResult:
    """The ``fmt`` candidate ``spec`` against libdarknet on ``images`` float32 (N, 3, H, W), through the one driver;
    a mode the candidate cannot run is listed first in the notes with the reason."""
    from repliscope.diff.layers.layer_result import MODES

    reference = DarknetLayers(cfg, weights, threads=threads, outputs=reference_outputs)
    cand = darknet_candidate(fmt, spec, reference, images, mapping_file=mapping_file, pairs=pairs, threads=threads)
    limits = dict(cand.mode_limits)
    run = tuple(m for m in MODES if m in modes and m not in limits)
    if not run:
        raise RepliscopeError("; ".join(f"{m} mode is not possible for this candidate: {limits[m]}" for m in modes))
    result = diff_darknet(reference, cand, images, modes=run, tolerance=tolerance, samples=samples)
    result.notes = [f"{m} mode not run: {limits[m]}" for m in modes if m in limits] + list(result.notes)
    return result


def verify_keras_file(
    cfg: Path,
    weights: Path,
    images: np.ndarray,
    candidate_path: Path,
    *,
    mapping: Mapping[str, str] | None = None,
    modes: tuple[str, ...] = ("golden", "carried"),
    tolerance: TolerancePolicy | None = None,
    threads: int = 1,
    samples: list[str] | None = None,
    reference_outputs: list[dict[str, np.ndarray]] | None = None,
) -> LayerDiffResult:
    """Every layer of the Keras port file ``candidate_path`` against libdarknet on ``images`` float32
    (N, 3, H, W) -> a LayerDiffResult (first divergent layer per mode); ``mapping``: Darknet layer -> Keras layer
    for the renamed ones."""
    pairs = None if mapping is None else {k: Pair(v) for k, v in mapping.items()}
    if pairs is not None:
        names = [lay.name for lay in load_network_cfg(cfg).layers]
        unknown = [k for k in pairs if k not in names]
        if unknown:
            raise MappingError(
                f"--mapping names Darknet layers the cfg does not have: {', '.join(unknown)} (layers: "
                f"{names[0]} … {names[-1]})"
            )
    return verify_candidate(
        cfg,
        weights,
        images,
        str(candidate_path),
        "keras",
        pairs=pairs,
        modes=modes,
        tolerance=tolerance,
        threads=threads,
        samples=samples,
        reference_outputs=reference_outputs,
    )


def darknet_format(candidate: str, candidate_format: str | None) -> str:
    """The format of a darknet manifest's ``--candidate``: as given, else detected, a ``FILE.py:NAME`` being a
    callable (there is no torch reference to build a torch port against)."""
    from repliscope.diff.layers.candidate_format import check_format, detect_format

    if candidate_format:
        fmt = check_format(candidate_format)
        if fmt == "torch":
            raise RepliscopeError(
                f"--candidate-format torch builds a torch port against the torch reference; a darknet manifest's "
                f"{candidate} is compared with libdarknet: give --candidate-format callable (FILE.py:NAME returning "
                "named tensors)"
            )
        return fmt
    fmt = detect_format(candidate)
    return "callable" if fmt == "torch" else fmt


def manifest_candidate_diff(
    manifest: Path,
    dataset: Any,
    batch: int,
    candidate: str,
    *,
    candidate_format: str | None = None,
    mapping_file: Path | None = None,
    modes: tuple[str, ...] = ("golden", "carried"),
    tolerance: TolerancePolicy | None = None,
    threads: int = 1,
) -> LayerDiffResult:
    """``repliscope diff MANIFEST --candidate X --layers`` for a darknet source: the manifest's pre-processed
    first ``batch`` samples of ``dataset``, libdarknet vs the candidate ``X``."""
    from repliscope.diff.task_level import first_batch
    from repliscope.evaluation.run import RunSettings, prepare

    fmt = darknet_format(candidate, candidate_format)
    allowed = candidate_formats()
    if fmt not in allowed:  # before the model and the samples are prepared
        raise RepliscopeError(
            f"--candidate {candidate} is a {fmt} candidate; a darknet manifest's --candidate is compared with "
            f"libdarknet and can be: {', '.join(allowed)} (e.g. a .keras file from repliscope convert MANIFEST "
            "--to keras, or your own .onnx file)"
        )
    prepared = prepare(manifest, RunSettings(runtime="darknet", threads=threads, batch_size=1))
    artifact = prepared.artifact
    if artifact.format != "darknet" or artifact.config_path is None:  # pragma: no cover - the CLI checks first
        raise RepliscopeError(f"{manifest} has source.format '{artifact.format}', not darknet")
    if mapping_file is not None:  # its mistakes before any sample is read or any model loaded
        network = load_network_cfg(artifact.config_path)
        load_pairs(mapping_file, [lay.name for lay in network.layers], passthroughs(network))
    ids, x = first_batch(prepared.pipeline, dataset, batch, tuple(artifact.input_shape[1:]))
    return verify_candidate(
        artifact.config_path,
        artifact.path,
        np.ascontiguousarray(x, np.float32),
        candidate,
        fmt,
        mapping_file=mapping_file,
        modes=modes,
        tolerance=tolerance,
        threads=threads,
        samples=list(ids),
    )

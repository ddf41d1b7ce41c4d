"""``repliscope diff MANIFEST --candidate PORT.keras --layers`` for a darknet manifest: a Keras port FILE (made by
``repliscope convert MANIFEST --to keras``, possibly edited since) compared layer by layer with libdarknet.

The reference is libdarknet's every-layer output (``net->layers[i].output``) on the manifest's pre-processed
samples, as in :mod:`repliscope.convert.darknet_verify`. The candidate is the saved model itself, loaded with
:class:`repliscope.backends.keras.candidate.KerasLayersCandidate` (nothing rebuilt from the ``.cfg``: a bug in the
file is what is measured). Pairing: each Darknet layer with the Keras layer of the same name (the converter names
the last Keras layer of every Darknet layer after it), or ``--mapping FILE`` (``darknet_layer: keras_layer``).

- **golden**: each Darknet layer's Keras unit (its named layer plus the unnamed layers before it back to the
  previous paired one: ``convolutional_2_pad`` + ``convolutional_2_conv`` + ``convolutional_2``) called on
  libdarknet's outputs of the layers it reads, NCHW -> NHWC;
- **carried**: the whole functional model, every paired layer's output streamed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.backends.darknet.reference import DarknetLayers
from repliscope.convert.darknet_cfg import load_network_cfg
from repliscope.convert.darknet_verify import diff_darknet
from repliscope.diff.base import Candidate, LayerInfo
from repliscope.diff.layers.layer_result import LayerDiffResult
from repliscope.diff.tolerance import TolerancePolicy
from repliscope.errors import RepliscopeError

CANDIDATE_FORMATS = ("keras",)
"""What ``--candidate`` can be for a darknet manifest."""


def load_keras_candidate(path: Path) -> Any:
    """The ``.keras`` file as a :class:`KerasLayersCandidate` (its ``DarknetYolo`` layer class registered first)."""
    from repliscope.backends.keras.candidate import KerasLayersCandidate, check_port_path
    from repliscope.convert.darknet_keras import _yolo_layer_class

    path = check_port_path(path)
    if path.suffix.lower() != ".keras":
        raise RepliscopeError(
            f"--candidate {path}: a darknet manifest's Keras candidate is a .keras file "
            "(repliscope convert MANIFEST --to keras --out FILE.keras)"
        )
    _yolo_layer_class()
    return KerasLayersCandidate.from_file(path)


def pair_layers(
    names: list[str], keras_names: list[str], mapping: Mapping[str, str] | None, source: str
) -> dict[str, str]:
    """Darknet layer name -> Keras layer name: by name, or ``mapping``; every Darknet layer must be paired with a
    layer the model has (RepliscopeError naming the ones that are not)."""
    have = set(keras_names)
    if mapping is None:
        pairs = {n: n for n in names}
        how = "by name"
    else:
        unknown = [k for k in mapping if k not in names]
        if unknown:
            raise RepliscopeError(
                f"--mapping names Darknet layers the cfg does not have: {', '.join(unknown)} (layers: "
                f"{names[0]} … {names[-1]})"
            )
        pairs = {n: mapping.get(n, n) for n in names}
        how = "by the mapping (else by name)"
    missing = [f"{n} -> {k}" for n, k in pairs.items() if k not in have]
    if missing:
        raise RepliscopeError(
            f"{source}: no Keras layer for {len(missing)} Darknet layer(s) paired {how}: {', '.join(missing[:6])}"
            f"{' …' if len(missing) > 6 else ''}; pass --mapping FILE (darknet_layer: keras_layer)"
        )
    return pairs


class PairedKerasFile(Candidate):
    """The ``.keras`` file's layers (a :class:`~repliscope.backends.keras.candidate.KerasLayersCandidate`) under
    the Darknet layer names they are paired with (``pairs``: Darknet layer -> Keras layer)."""

    name = "keras"

    def __init__(self, inner: Any, pairs: Mapping[str, str], info: dict[str, Any], notes: list[str]) -> None:
        self.inner, self.pairs, self.info, self.notes = inner, dict(pairs), info, notes
        self._back = {k: n for n, k in self.pairs.items()}

    def describe(self) -> dict[str, Any]:
        return dict(self.info)

    def mapped_layers(self, reference_layers: Sequence[LayerInfo]) -> list[str]:
        return list(self.pairs)

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        return np.asarray(self.inner.run_layer(self.pairs[path], list(inputs)))

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        keras_names = [self.pairs[p] for p in paths]
        for name, out in self.inner.forward_layers(x, keras_names):
            yield self._back[name], out


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
    (N, 3, H, W) -> a LayerDiffResult (first divergent layer per mode), through the one driver."""
    import keras

    net = load_network_cfg(cfg)
    cand = load_keras_candidate(candidate_path)
    names = [lay.name for lay in net.layers]
    units = cand.units(images)
    pairs = pair_layers(names, [u.name for u in units], mapping, str(candidate_path))
    cand.set_mapped(pairs.values())
    renamed = {n: k for n, k in pairs.items() if n != k}
    notes = [
        f"candidate: the Keras port file {candidate_path} (Keras {keras.__version__}, backend "
        f"{keras.backend.backend()}, NHWC), loaded as saved",
    ]
    info: dict[str, Any] = {
        "candidate": "keras",
        "format": "keras",
        "source": str(candidate_path),
        "mapping_origin": "from --mapping" if mapping is not None else "by Darknet layer name",
    }
    if renamed:
        info["pairs"] = renamed
    reference = DarknetLayers(cfg, weights, threads=threads, outputs=reference_outputs)
    return diff_darknet(
        reference, PairedKerasFile(cand, pairs, info, notes), images, modes=modes, tolerance=tolerance, samples=samples
    )


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
    first ``batch`` samples of ``dataset``, libdarknet vs the Keras port file ``X``."""
    from repliscope.diff.layers.candidate_format import check_format, detect_format
    from repliscope.diff.layers.mapping import load_mapping
    from repliscope.diff.task_level import first_batch
    from repliscope.evaluation.run import RunSettings, prepare

    fmt = check_format(candidate_format) if candidate_format else detect_format(candidate)
    if fmt not in CANDIDATE_FORMATS:
        raise RepliscopeError(
            f"--candidate {candidate} is a {fmt} candidate; a darknet manifest's --candidate is compared with "
            f"libdarknet and can be: {', '.join(CANDIDATE_FORMATS)} (a .keras file from repliscope convert "
            "MANIFEST --to keras); the ONNX conversion is compared with --runtimes darknet onnxruntime --layers"
        )
    prepared = prepare(manifest, RunSettings(runtime="darknet", threads=threads, batch_size=1))
    artifact = prepared.artifact
    if artifact.format != "darknet" or artifact.config_path is None:  # pragma: no cover - the CLI checks first
        raise RepliscopeError(f"{manifest} has source.format '{artifact.format}', not darknet")
    mapping = load_mapping(mapping_file) if mapping_file is not None else None
    ids, x = first_batch(prepared.pipeline, dataset, batch, tuple(artifact.input_shape[1:]))
    return verify_keras_file(
        artifact.config_path,
        artifact.path,
        np.ascontiguousarray(x, np.float32),
        Path(candidate),
        mapping=mapping,
        modes=modes,
        tolerance=tolerance,
        threads=threads,
        samples=list(ids),
    )

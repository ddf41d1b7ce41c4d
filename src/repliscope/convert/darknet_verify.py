"""Layer-by-layer verification of the Darknet -> ONNX conversion against libdarknet (the original C code).

The reference is Debian's libdarknet (``darknet`` runtime): every layer's output ``net->layers[i].output`` on real
pre-processed samples. The candidate is the ONNX conversion on onnxruntime, its tensors named after the Darknet
layers (:mod:`repliscope.convert.darknet_onnx`), so units pair by name with no mapping:

- **golden**: each layer's ONNX nodes cut out (``onnx.utils.Extractor``) and fed libdarknet's outputs of the
  layers it reads, so an error is attributed to the layer that makes it;
- **carried**: the whole converted graph with every layer tensor fetched, to show how error grows.

Both sides go through the one unit-level driver (:func:`repliscope.diff.layers.driver.diff_layers`): libdarknet
is its :class:`~repliscope.backends.darknet.reference.DarknetLayers` reference, the conversions are candidates
(:class:`DarknetOnnxCandidate`, :class:`DarknetKerasCandidate`).

Tolerance per layer: ``k * eps(float32) * sqrt(n) * max|ref|`` with ``n`` the reduction length (a conv's
``channels x size x size``, 1 otherwise); carried tolerances accumulate in quadrature
(:mod:`repliscope.diff.tolerance`). Exit status of ``repliscope diff MANIFEST --runtimes darknet onnxruntime
--layers``: 1 when any layer diverges.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.backends.darknet.reference import FORMULA, DarknetLayers, layer_sources
from repliscope.convert.darknet_cfg import Network, load_network_cfg, read_weights
from repliscope.convert.darknet_onnx import DARKNET_BN_EPSILON, LEAKY_SLOPE, build_model
from repliscope.diff.base import Candidate, LayerInfo
from repliscope.diff.layers.driver import diff_layers
from repliscope.diff.layers.layer_result import MODES, LayerDiffResult, Mode
from repliscope.diff.tolerance import TolerancePolicy


class DarknetOnnxCandidate(Candidate):
    """repliscope's Darknet -> ONNX conversion (:mod:`repliscope.convert.darknet_onnx`, every layer's tensor named
    after it) on onnxruntime, graph optimisations off: golden runs each layer's nodes cut out
    (``onnx.utils.Extractor``) on the reference inputs, carried the whole graph with every layer tensor fetched."""

    name = "onnxruntime"

    def __init__(self, net: Network, weights: Path, *, epsilon: float, leaky_slope: float, threads: int = 1) -> None:
        import onnxruntime as ort

        self.net = net
        self.model = build_model(
            net, read_weights(weights, net), epsilon=epsilon, leaky_slope=leaky_slope, outputs=self._names()
        )
        self._options = ort.SessionOptions()
        self._options.intra_op_num_threads = threads
        self._options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        self._extractor: Any = None
        self.notes = [
            f"candidate: repliscope.convert.darknet_onnx (BN epsilon {epsilon:g} added to sqrt(variance), leaky "
            f"slope {leaky_slope:g}) on onnxruntime {ort.__version__}, graph optimisations off"
        ]

    def _names(self) -> list[str]:
        return [lay.name for lay in self.net.layers]

    def _session(self, model: Any) -> Any:
        import onnxruntime as ort

        return ort.InferenceSession(model.SerializeToString(), self._options, providers=["CPUExecutionProvider"])

    def describe(self) -> dict[str, Any]:
        return {
            "candidate": "onnxruntime",
            "runtime": "onnxruntime",
            "format": "onnx",
            "mapping_origin": "by Darknet layer name",
            "converter": "repliscope.convert.darknet_onnx",
        }

    def mapped_layers(self, reference_layers: Sequence[LayerInfo]) -> list[str]:
        return self._names()

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        import onnx.utils

        if self._extractor is None:
            self._extractor = onnx.utils.Extractor(self.model)
        lay = next(lay for lay in self.net.layers if lay.name == path)
        names = [self.net.layers[s].name if s >= 0 else "data" for s in layer_sources(lay)]
        given = dict(zip(names, inputs, strict=True))
        session = self._session(self._extractor.extract_model(sorted(set(names)), [path]))
        feed = {n: given[n] for n in {i.name for i in session.get_inputs()}}
        return np.asarray(session.run([path], feed)[0])

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        wanted = set(paths)
        outputs = self._session(self.model).run(None, {"data": x})
        for name, out in zip(self._names(), outputs, strict=True):
            if name in wanted:
                yield name, out


class DarknetKerasCandidate(Candidate):
    """repliscope's Keras port built from the ``.cfg`` (:mod:`repliscope.convert.darknet_keras`, NHWC): golden
    calls each Darknet layer's Keras layers on the reference inputs, carried runs the functional model."""

    name = "keras"

    def __init__(self, net: Network, weights: Path, *, epsilon: float, leaky_slope: float) -> None:
        import keras

        from repliscope.convert.darknet_keras import build_keras

        self.net = net
        self.model, self.parts = build_keras(net, read_weights(weights, net), epsilon=epsilon, leaky_slope=leaky_slope)
        self.notes = [
            f"candidate: repliscope.convert.darknet_keras (Keras {keras.__version__}, backend "
            f"{keras.backend.backend()}, NHWC; BN epsilon {epsilon:g}, leaky slope {leaky_slope:g})"
        ]

    def describe(self) -> dict[str, Any]:
        return {
            "candidate": "keras",
            "format": "keras",
            "mapping_origin": "by Darknet layer name",
            "converter": "repliscope.convert.darknet_keras",
        }

    def mapped_layers(self, reference_layers: Sequence[LayerInfo]) -> list[str]:
        return [lay.name for lay in self.net.layers]

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        return self.sublayer_outputs(path, inputs)[-1][1]

    def sublayer_outputs(self, path: str, inputs: Sequence[np.ndarray]) -> list[tuple[str, np.ndarray]]:
        """The Keras layers of Darknet layer ``path`` one by one on ``inputs``: ("name (Class)", NCHW output)."""
        import keras

        lay = next(lay for lay in self.net.layers if lay.name == path)
        nhwc = [np.ascontiguousarray(a.transpose(0, 2, 3, 1)) for a in inputs]
        x: Any = nhwc if lay.type in ("route", "shortcut") and len(nhwc) > 1 else nhwc[0]
        found: list[tuple[str, np.ndarray]] = []
        for layer in self.parts[path]:
            x = layer(x)
            out = np.asarray(keras.ops.convert_to_numpy(x)).transpose(0, 3, 1, 2)
            found.append((f"{layer.name} ({type(layer).__name__})", out))
        return found

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        from repliscope.convert.darknet_keras import keras_layer_outputs

        wanted = set(paths)
        outputs = keras_layer_outputs(self.model, x, [lay.name for lay in self.net.layers])
        for name, out in outputs.items():
            if name in wanted:
                yield name, out


def diff_darknet(
    reference: DarknetLayers,
    candidate: Candidate,
    images: np.ndarray,
    *,
    modes: tuple[str, ...] = ("golden", "carried"),
    tolerance: TolerancePolicy | None = None,
    samples: Sequence[str] | None = None,
) -> LayerDiffResult:
    """``candidate`` against libdarknet on ``images`` float32 (N, 3, H, W), through the one driver
    (:func:`~repliscope.diff.layers.driver.diff_layers`), the modes in their canonical order."""
    ordered: list[Mode] = [m for m in MODES if m in modes]
    return diff_layers(
        reference, candidate, images, modes=ordered, tolerance=tolerance, samples=samples or [], formula=FORMULA
    )


def verify_layers(
    cfg: Path,
    weights: Path,
    images: np.ndarray,
    *,
    modes: tuple[str, ...] = ("golden", "carried"),
    tolerance: TolerancePolicy | None = None,
    threads: int = 1,
    samples: list[str] | None = None,
    epsilon: float = DARKNET_BN_EPSILON,
    leaky_slope: float = LEAKY_SLOPE,
    reference_outputs: list[dict[str, np.ndarray]] | None = None,
    candidate: str = "onnx",
) -> LayerDiffResult:
    """Compare every layer of the conversion with libdarknet on ``images`` float32 (N, 3, H, W).

    ``epsilon`` / ``leaky_slope`` build the candidate with those values (a test injects a converter bug this way);
    ``reference_outputs``: libdarknet's per-image layer outputs when already computed (else run here).
    ``candidate``: ``onnx`` (the conversion on onnxruntime, :class:`DarknetOnnxCandidate`) or ``keras`` (the Keras
    port, :class:`DarknetKerasCandidate`).
    """
    reference = DarknetLayers(cfg, weights, threads=threads, outputs=reference_outputs)
    net = load_network_cfg(cfg)
    cand: Candidate = (
        DarknetKerasCandidate(net, weights, epsilon=epsilon, leaky_slope=leaky_slope)
        if candidate == "keras"
        else DarknetOnnxCandidate(net, weights, epsilon=epsilon, leaky_slope=leaky_slope, threads=threads)
    )
    return diff_darknet(reference, cand, images, modes=modes, tolerance=tolerance, samples=samples)


def manifest_layer_diff(
    manifest: Path,
    dataset: Any,
    batch: int,
    *,
    modes: tuple[str, ...] = ("golden", "carried"),
    tolerance: TolerancePolicy | None = None,
    threads: int = 1,
    candidate: str = "onnx",
) -> LayerDiffResult:
    """``repliscope diff MANIFEST --runtimes darknet onnxruntime|keras --layers``: the manifest's pre-processed first
    ``batch`` samples of ``dataset``, libdarknet vs the ONNX conversion (or the Keras port), layer by layer."""
    from repliscope.diff.task_level import first_batch
    from repliscope.errors import RepliscopeError
    from repliscope.evaluation.run import RunSettings, prepare

    prepared = prepare(manifest, RunSettings(runtime="darknet", threads=threads, batch_size=1))
    artifact = prepared.artifact
    if artifact.format != "darknet" or artifact.config_path is None:
        raise RepliscopeError(
            f"--runtimes darknet onnxruntime --layers compares a darknet source with its ONNX "
            f"conversion; {manifest} has source.format '{artifact.format}'"
        )
    ids, x = first_batch(prepared.pipeline, dataset, batch, tuple(artifact.input_shape[1:]))
    return verify_layers(
        artifact.config_path,
        artifact.path,
        np.ascontiguousarray(x, np.float32),
        modes=modes,
        tolerance=tolerance,
        threads=threads,
        samples=list(ids),
        candidate=candidate,
    )


def convert_manifest(
    manifest: Path, out: Path, dataset: Any, samples: int, threads: int = 1, target: str = "onnx"
) -> tuple[dict[str, Any], LayerDiffResult | None]:
    """``repliscope convert MANIFEST --to onnx|keras --out FILE``: the darknet source converted (ONNX, or the Keras
    port), then verified layer by layer against libdarknet on the first ``samples`` pre-processed samples (None
    when libdarknet is absent)."""
    from repliscope.backends.darknet.lib import LIBDARKNET
    from repliscope.convert.darknet_onnx import convert
    from repliscope.diff.task_level import first_batch
    from repliscope.errors import RepliscopeError
    from repliscope.evaluation.run import RunSettings, prepare

    suffix = ".onnx" if target == "onnx" else ".keras"
    if out.suffix != suffix:
        raise RepliscopeError(f"--out {out}: a {target} file ends in {suffix}")
    prepared = prepare(manifest, RunSettings(runtime="onnxruntime", threads=threads, batch_size=1))
    artifact = prepared.artifact
    if artifact.format != "darknet" or artifact.config_path is None:
        raise RepliscopeError(
            f"--to {target} converts a darknet source (.cfg + .weights) here; {manifest} has "
            f"source.format "
            f"'{artifact.format}' (torch sources are exported by the onnxruntime runtime itself)"
        )
    if target == "onnx":
        info = convert(artifact.config_path, artifact.path, out)
    else:
        from repliscope.convert.darknet_keras import convert_keras

        info = convert_keras(artifact.config_path, artifact.path, out)
    if not LIBDARKNET.is_file():
        return info, None
    ids, x = first_batch(prepared.pipeline, dataset, samples, tuple(artifact.input_shape[1:]))
    return info, verify_layers(
        artifact.config_path,
        artifact.path,
        np.ascontiguousarray(x, np.float32),
        threads=threads,
        samples=list(ids),
        candidate=target,
    )

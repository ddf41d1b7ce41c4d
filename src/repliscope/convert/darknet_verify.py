"""Layer-by-layer verification of the Darknet -> ONNX conversion against libdarknet (the original C code).

The reference is Debian's libdarknet (``darknet`` runtime): every layer's output ``net->layers[i].output`` on real
pre-processed samples. The candidate is the ONNX conversion on onnxruntime, its tensors named after the Darknet
layers (:mod:`repliscope.convert.darknet_onnx`), so units pair by name with no mapping:

- **golden**: each layer's ONNX nodes cut out (``onnx.utils.Extractor``) and fed libdarknet's outputs of the
  layers it reads, so an error is attributed to the layer that makes it;
- **carried**: the whole converted graph with every layer tensor fetched, to show how error grows.

Tolerance per layer: ``k * eps(float32) * sqrt(n) * max|ref|`` with ``n`` the reduction length (a conv's
``channels x size x size``, 1 otherwise); carried tolerances accumulate in quadrature
(:mod:`repliscope.diff.tolerance`). Exit status of ``repliscope diff MANIFEST --runtimes darknet onnxruntime
--layers``: 1 when any layer diverges.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.convert.darknet_cfg import LayerPlan, Network, load_network_cfg, read_weights
from repliscope.convert.darknet_onnx import DARKNET_BN_EPSILON, LEAKY_SLOPE, build_model
from repliscope.diff.layer_result import MODES, Divergence, LayerDiffResult, LayerRow, ModeSummary
from repliscope.diff.tolerance import ErrorStats, TolerancePolicy, accumulate, compare_arrays

KINDS = {
    "convolutional": "Conv",
    "maxpool": "MaxPool",
    "route": "Concat",
    "upsample": "Resize",
    "shortcut": "Add",
    "yolo": "Sigmoid",
}


def _sources(lay: LayerPlan) -> list[int]:
    if lay.type == "route":
        return list(lay.params["layers"])  # type: ignore[call-overload]
    if lay.type == "shortcut":
        return [lay.index - 1, int(lay.params["from"])]  # type: ignore[call-overload]
    return [lay.index - 1]


def _reduction(lay: LayerPlan) -> int:
    if lay.type == "convolutional":
        size = int(lay.params["size"])  # type: ignore[call-overload]
        return lay.in_shape[0] * size * size
    if lay.type == "maxpool":
        size = int(lay.params["size"])  # type: ignore[call-overload]
        return size * size
    return 1


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
    ``candidate``: ``onnx`` (the conversion on onnxruntime) or ``keras`` (the Keras port,
    :mod:`repliscope.convert.darknet_keras`: golden = each Darknet layer's Keras layers called on libdarknet's
    inputs in NHWC, carried = the functional model).
    """
    if candidate == "keras":
        return _verify_keras(
            cfg,
            weights,
            images,
            modes=modes,
            tolerance=tolerance,
            threads=threads,
            samples=samples,
            epsilon=epsilon,
            leaky_slope=leaky_slope,
            reference_outputs=reference_outputs,
        )
    import onnx.utils
    import onnxruntime as ort

    start = time.perf_counter()
    policy = tolerance or TolerancePolicy()
    net: Network = load_network_cfg(cfg)
    model = build_model(
        net,
        read_weights(weights, net),
        epsilon=epsilon,
        leaky_slope=leaky_slope,
        outputs=[lay.name for lay in net.layers],
    )
    if reference_outputs is None:
        reference_outputs = darknet_layer_outputs(cfg, weights, images, threads)
    ref = {lay.name: np.stack([r[lay.name] for r in reference_outputs]) for lay in net.layers}
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    providers = ["CPUExecutionProvider"]
    carried: dict[str, np.ndarray] = {}
    if "carried" in modes:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=providers)
        carried = dict(zip([lay.name for lay in net.layers], session.run(None, {"data": images}), strict=True))
    extractor = onnx.utils.Extractor(model) if "golden" in modes else None

    def golden(lay: LayerPlan) -> np.ndarray:
        assert extractor is not None
        names = [net.layers[s].name if s >= 0 else "data" for s in _sources(lay)]
        sub = extractor.extract_model(sorted(set(names)), [lay.name])
        sess = ort.InferenceSession(sub.SerializeToString(), options, providers=providers)
        feed = {n: (images if n == "data" else ref[n]) for n in {i.name for i in sess.get_inputs()}}
        return np.asarray(sess.run([lay.name], feed)[0])

    notes = [
        f"reference: every layer's output buffer in libdarknet (get_network_image_layer) for {cfg.name}, "
        "each image run alone",
        f"candidate: repliscope.convert.darknet_onnx (BN epsilon {epsilon:g} added to sqrt(variance), leaky "
        f"slope {leaky_slope:g}) on onnxruntime {ort.__version__}, graph optimisations off",
    ]
    return _assemble(
        net,
        cfg,
        weights,
        images,
        ref,
        golden if extractor is not None else None,
        carried,
        modes,
        policy,
        samples,
        {
            "candidate": "onnxruntime",
            "runtime": "onnxruntime",
            "format": "onnx",
            "mapping_origin": "by Darknet layer name",
            "converter": "repliscope.convert.darknet_onnx",
        },
        notes,
        start,
    )


def darknet_layer_outputs(
    cfg: Path, weights: Path, images: np.ndarray, threads: int = 1
) -> list[dict[str, np.ndarray]]:
    """libdarknet's every-layer outputs for each image of ``images`` (N, 3, H, W)."""
    from repliscope.backends.darknet.runner import DarknetRunner
    from repliscope.runtimes.base import ModelArtifact

    artifact = ModelArtifact(
        path=weights,
        sha256="",
        format="darknet",
        input_name="data",
        input_shape=(-1, *images.shape[1:]),
        input_dtype="float32",
        config_path=cfg,
    )
    runner = DarknetRunner(artifact, threads=threads, cache_dir=Path("."))
    return [runner.layer_outputs(x) for x in images]


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


def _verify_keras(
    cfg: Path,
    weights: Path,
    images: np.ndarray,
    *,
    modes: tuple[str, ...],
    tolerance: TolerancePolicy | None,
    threads: int,
    samples: list[str] | None,
    epsilon: float,
    leaky_slope: float,
    reference_outputs: list[dict[str, np.ndarray]] | None,
) -> LayerDiffResult:
    import keras

    from repliscope.convert.darknet_keras import build_keras, keras_layer_outputs

    start = time.perf_counter()
    policy = tolerance or TolerancePolicy()
    net = load_network_cfg(cfg)
    model, parts = build_keras(net, read_weights(weights, net), epsilon=epsilon, leaky_slope=leaky_slope)
    if reference_outputs is None:
        reference_outputs = darknet_layer_outputs(cfg, weights, images, threads)
    ref = {lay.name: np.stack([r[lay.name] for r in reference_outputs]) for lay in net.layers}
    names = [lay.name for lay in net.layers]
    carried = keras_layer_outputs(model, images, names) if "carried" in modes else {}

    def nhwc(name: str) -> np.ndarray:
        return np.ascontiguousarray((images if name == "data" else ref[name]).transpose(0, 2, 3, 1))

    def golden(lay: LayerPlan) -> np.ndarray:
        srcs = [net.layers[s].name if s >= 0 else "data" for s in _sources(lay)]
        x: Any = [nhwc(n) for n in srcs] if lay.type in ("route", "shortcut") and len(srcs) > 1 else nhwc(srcs[0])
        for layer in parts[lay.name]:
            x = layer(x)
        return np.asarray(keras.ops.convert_to_numpy(x)).transpose(0, 3, 1, 2)

    notes = [
        f"reference: every layer's output buffer in libdarknet (get_network_image_layer) for {cfg.name}, "
        "each image run alone",
        f"candidate: repliscope.convert.darknet_keras (Keras {keras.__version__}, backend "
        f"{keras.backend.backend()}, NHWC; BN epsilon {epsilon:g}, leaky slope {leaky_slope:g})",
    ]
    return _assemble(
        net,
        cfg,
        weights,
        images,
        ref,
        golden if "golden" in modes else None,
        carried,
        modes,
        policy,
        samples,
        {
            "candidate": "keras",
            "format": "keras",
            "mapping_origin": "by Darknet layer name",
            "converter": "repliscope.convert.darknet_keras",
        },
        notes,
        start,
    )


def _assemble(
    net: Network,
    cfg: Path,
    weights: Path,
    images: np.ndarray,
    ref: dict[str, np.ndarray],
    golden: Any,
    carried: dict[str, np.ndarray],
    modes: tuple[str, ...],
    policy: TolerancePolicy,
    samples: list[str] | None,
    candidate: dict[str, Any],
    notes: list[str],
    start: float,
) -> LayerDiffResult:
    """The LayerDiffResult of per-layer ``golden(layer) -> NCHW array`` and ``carried`` outputs against ``ref``."""
    local = [
        policy.tolerance(lay.name, [KINDS[lay.type]], "float32", _reduction(lay), float(np.abs(ref[lay.name]).max()))
        for lay in net.layers
    ]
    acc = accumulate(local) if policy.carried == "accumulated" else local
    rows: list[LayerRow] = []
    first: dict[str, Divergence | None] = {m: None for m in modes}
    for i, lay in enumerate(net.layers):
        r = ref[lay.name]
        row = LayerRow(
            index=i,
            path=lay.name,
            covers=[lay.name],
            kind=KINDS[lay.type],
            op=lay.type,
            source=f"{cfg.name}:{lay.line}",
            reduction=_reduction(lay),
            dtype="float32",
            ref_shape=list(r.shape),
            ref_max_abs=float(np.abs(r).max()),
        )
        if golden is not None:
            row.golden = compare_arrays(r, golden(lay), local[i])
        if carried:
            row.carried = compare_arrays(r, carried[lay.name], acc[i])
        for mode, stats in (("golden", row.golden), ("carried", row.carried)):
            if stats is not None and not stats.passed and mode in first and first[mode] is None:
                first[mode] = Divergence(
                    mode=mode,  # type: ignore[arg-type]
                    index=i,
                    path=lay.name,
                    covers=[lay.name],
                    kind=row.kind,
                    source=row.source,
                    max_abs=stats.max_abs,
                    tolerance=stats.tolerance,
                    ratio=stats.ratio,
                )
        rows.append(row)
    summary = {}
    for mode in modes:
        compared: list[ErrorStats] = [e for e in (getattr(row, mode) for row in rows) if e is not None]
        summary[mode] = ModeSummary(
            compared=len(compared),
            passed=sum(e.passed for e in compared),
            failed=sum(not e.passed for e in compared),
            max_ratio=max((e.ratio for e in compared), default=0.0),
            reference_units=len(net.layers),
        )
    return LayerDiffResult(
        reference={"framework": "darknet (libdarknet)", "runtime": "darknet", "cfg": str(cfg), "weights": str(weights)},
        candidate=candidate,
        modes=[m for m in MODES if m in modes],
        input_shape=list(images.shape),
        input_dtype=str(images.dtype),
        samples=samples or [],
        tolerance=policy,
        formula="k * eps(float32) * sqrt(reduction) * max|ref|",
        layers=rows,
        reference_layers=len(net.layers),
        first_divergent=first,
        summary=summary,
        seconds=time.perf_counter() - start,
        notes=notes,
    )

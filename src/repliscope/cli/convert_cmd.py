"""``repliscope convert``: a manifest's model into another framework, written and verified (:data:`ROUTES`).

    repliscope convert MANIFEST --to keras --mapping MAPPING.yaml --out weights.keras [--model PORT_DIR]
    repliscope convert DARKNET_MANIFEST --to onnx --out yolo.onnx      (or --to keras --out yolo.keras)

For torch, ``--mapping`` and ``--out`` are required (the README writes the shipped example's command in full).

The manifest's torch module is built exactly as ``evaluate`` builds it; its state_dict is mapped onto the Keras
port (``--model``: a folder with ``model.py``, or ``file.py:function``; default: the mapping file's folder).
The ``.keras`` file is written, reloaded, and checked against torch on real samples (softmax and top-1) and,
when the layer-diff engine is installed, layer by layer (golden mode). The mapping is copied beside the output
as ``<out>.mapping.yaml`` so ``repliscope diff --candidate <out>`` finds it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from repliscope.cli.common import dataset_help
from repliscope.errors import RepliscopeError

ROUTES: tuple[tuple[str, str, str], ...] = (
    (
        "pytorch_state_dict",
        "keras",
        "torch weights onto your Keras 3 port by the --mapping file (name rules, layouts), checked on samples "
        "(softmax, top-1) and layer by layer",
    ),
    (
        "darknet",
        "onnx",
        "Darknet .cfg + .weights to one ONNX graph (batch norm folded), checked layer by layer against libdarknet",
    ),
    (
        "darknet",
        "keras",
        "Darknet .cfg + .weights to the Keras port (DarknetYolo), checked layer by layer against libdarknet",
    ),
)
"""(manifest source.format, --to, what is written and how it is checked): what ``convert`` does; its help and the
error of an unknown pair are made from it."""


def convert_help() -> str:
    """The command's help: every route of :data:`ROUTES`, and the conversions the runtimes make by themselves
    (the :data:`repliscope.backends.CONVERSIONS` registry), which need no ``convert``."""
    from repliscope.backends import CONVERSIONS

    routes = "; ".join(f"{src} --to {to}: {what}" for src, to, what in ROUTES)
    return (
        f"Convert a manifest's model into another framework and verify the result. {routes}. The runtimes also "
        f"convert by themselves when evaluate needs it (one verified cache): {', '.join(CONVERSIONS.names())}."
    )


def register(app: typer.Typer) -> None:
    """Add the ``convert`` command to ``app``."""
    app.command("convert", help=convert_help())(convert)


def convert(
    manifest: Annotated[
        Path, typer.Argument(help="The manifest of the model to convert (YAML): a torch or darknet source.")
    ],
    out: Annotated[Path, typer.Option("--out", help="The file to write (.keras; .onnx with --to onnx).")],
    mapping: Annotated[
        Path | None, typer.Option("--mapping", help="Mapping file (YAML): name rules + layout kinds (--to keras).")
    ] = None,
    to: Annotated[
        str,
        typer.Option(
            "--to",
            help="Target framework: "
            + "; ".join(f"{to} (a {src} source)" for src, to, _ in ROUTES)
            + " (default: keras; a darknet source without --mapping goes to its Keras port).",
        ),
    ] = "keras",
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="The Keras port: a folder with model.py, a .py "
            "file or 'file.py:function' (default: the mapping's folder).",
        ),
    ] = None,
    dataset: Annotated[str, typer.Option(help=dataset_help("Samples for the check"))] = "foolbox_imagenet",
    verify_samples: Annotated[int, typer.Option(min=1, help="How many samples the check runs.")] = 8,
    tolerance: Annotated[float, typer.Option(help="Largest allowed |softmax difference|.")] = 1e-4,
    layers: Annotated[bool, typer.Option(help="Also run the layer-level golden diff (if installed).")] = True,
) -> None:
    """Convert the manifest's model into another framework and verify it (the help lists every route:
    :func:`convert_help`)."""
    try:
        ok = _run(manifest, to, mapping, out, model, dataset, verify_samples, tolerance, layers)
    except RepliscopeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(code=2) from None
    if not ok:
        raise typer.Exit(code=1)


def _run(
    manifest: Path,
    to: str,
    mapping_path: Path | None,
    out: Path,
    model_spec: str | None,
    dataset: str,
    n: int,
    tolerance: float,
    run_layers: bool,
) -> bool:
    if to == "onnx" or (to == "keras" and mapping_path is None and _is_darknet(manifest)):
        return _darknet_to_onnx(manifest, out, dataset, n, to)
    if to != "keras":
        allowed = ", ".join(f"{t} (from {src})" for src, t, _ in ROUTES)
        raise RepliscopeError(f"--to {to!r}: unknown target framework (allowed: {allowed})")
    if mapping_path is None:
        raise RepliscopeError("--to keras needs --mapping MAPPING.yaml (torch module paths -> Keras layers)")
    if out.suffix != ".keras":
        raise RepliscopeError(f"--out {out}: Keras 3 saves whole models to files ending in .keras")
    _check_mapping_file(mapping_path)
    from repliscope.backends.torch.loader import build_torch_module
    from repliscope.cli.common import quiet_keras
    from repliscope.convert import convert_state_dict, load_mapping, load_port
    from repliscope.convert.verify import compare_outputs, save_and_reload

    mapping = load_mapping(mapping_path)
    loaded, artifact = _manifest(manifest)
    quiet_keras()  # TensorFlow's start-up log lines are noise here
    module = build_torch_module(artifact)
    keras_model = load_port(model_spec or mapping.base_dir, mapping)
    report = convert_state_dict(module.state_dict(), keras_model, mapping, module)
    typer.echo(
        f"{len(report.assigned)} weights converted, {len(report.ignored)} torch entries ignored "
        f"({', '.join(mapping.spec.ignore) or 'none'})"
    )
    for line in report.epsilon_set + report.notes:
        typer.echo(f"  note: {line}")
    reloaded = save_and_reload(keras_model, out)
    shutil.copyfile(mapping_path, out.with_suffix(".mapping.yaml"))
    typer.echo(f"wrote {out} (mapping copied to {out.with_suffix('.mapping.yaml')})")

    x, ids = _samples(loaded, artifact, dataset, n)
    check = compare_outputs(module, reloaded, x)
    ok = check.top1_identical and check.max_abs_prob_diff <= tolerance
    top1 = "identical" if check.top1_identical else f"flipped on {[ids[i] for i in check.flipped]}"
    typer.echo(
        f"outputs on {check.n} samples of {dataset}: max |softmax diff| {check.max_abs_prob_diff:.2e} "
        f"(tolerance {tolerance:g}), top-1 {top1} on {check.top1_agreement}/{check.n}"
    )
    if run_layers:
        ok = _layer_check(module, reloaded, mapping, x, ids) and ok
    typer.echo("verified" if ok else "VERIFICATION FAILED")
    return ok


def _is_darknet(manifest: Path) -> bool:
    from repliscope.manifest.loader import load_manifest

    return load_manifest(manifest).manifest.source.format == "darknet"


def _darknet_to_onnx(manifest: Path, out: Path, dataset: str, n: int, to: str = "onnx") -> bool:
    """A darknet source -> ONNX (or the Keras port), then every layer against libdarknet
    (repliscope.convert.darknet_verify)."""
    from repliscope.convert.darknet_verify import convert_manifest
    from repliscope.datasets import resolve_dataset

    info, result = convert_manifest(manifest, out, resolve_dataset(dataset), n, target=to)
    opset = f"opset {info['opset']}, " if "opset" in info else ""
    typer.echo(
        f"wrote {out}: {info['layers']} Darknet layers, {info['parameters']:,} parameters (BN folded), "
        f"{opset}{info['seconds']:.2f} s"
    )
    if result is None:
        typer.echo("not verified: darknet is not installed; install it with: apt-get install darknet")
        return True
    for mode, s in result.summary.items():
        first = result.first_divergent.get(mode)
        typer.echo(
            f"{mode}: {s.passed}/{s.compared} layers within tolerance (max ratio {s.max_ratio:.3g})"
            + (f"; first divergent {first.path} ({first.max_abs:.3g} > {first.tolerance:.3g})" if first else "")
        )
    return result.passed


def _check_mapping_file(path: Path) -> None:
    """``--mapping`` must be an existing UTF-8 ``.yaml``/``.yml`` file (a model file there is a mix-up)."""
    if not path.is_file():
        raise RepliscopeError(
            f"--mapping {path}: no such file (the mapping of the shipped Keras example is "
            "examples/keras_efficientnet_lite/mapping.yaml)"
        )
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise RepliscopeError(f"--mapping {path}: a mapping is a YAML file (.yaml or .yml), not '{path.suffix}'")
    try:
        path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RepliscopeError(f"--mapping {path}: not UTF-8 text (byte {exc.start}); a mapping is YAML") from None


def _manifest(path: Path) -> tuple[Any, Any]:
    from repliscope.evaluation.artifacts import resolve_artifact
    from repliscope.manifest.loader import load_manifest
    from repliscope.paths import default_cache_dir

    loaded = load_manifest(path)
    if loaded.manifest.framework.name != "torch":
        raise RepliscopeError(
            f"{path}: convert reads torch weights; this manifest's framework is '{loaded.manifest.framework.name}'"
        )
    return loaded, resolve_artifact(loaded, default_cache_dir())


def _samples(loaded: Any, artifact: Any, dataset: str, n: int) -> tuple[np.ndarray, list[str]]:
    """The first ``n`` samples pre-processed by the manifest's own pipeline (reference layout)."""
    from repliscope.datasets import resolve_dataset
    from repliscope.evaluation.artifacts import load_class_names
    from repliscope.evaluation.engine import prepare_sample
    from repliscope.manifest.loader import build_ops
    from repliscope.ops.base import BuildContext
    from repliscope.ops.pipeline import Pipeline
    from repliscope.paths import default_cache_dir

    pre, post = build_ops(loaded, BuildContext(class_names=load_class_names(loaded, default_cache_dir())))
    pipeline = Pipeline(pre, post)
    data = resolve_dataset(dataset, limit=n)
    arrays, ids = [], []
    for sample in data.samples:
        array, failure = prepare_sample(pipeline, sample, tuple(artifact.input_shape[1:]))
        if array is None:
            raise RepliscopeError(f"sample '{sample.id}' of {dataset} could not be pre-processed: {failure}")
        arrays.append(array)
        ids.append(sample.id)
    return np.stack(arrays).astype(np.float32), ids


def _layer_check(module: Any, keras_model: Any, mapping: Any, x: np.ndarray, ids: list[str]) -> bool:
    from repliscope.backends.keras.candidate import KerasCandidate
    from repliscope.convert.verify import layer_diff

    result = layer_diff(module, KerasCandidate(keras_model, mapping), x, ids)
    if result is None:
        typer.echo("layer diff: skipped (repliscope.diff.layers.driver is not installed)")
        return True
    summary = result.summary["golden"]
    first = result.first_divergent["golden"]
    typer.echo(
        f"layer diff (golden): {summary.passed}/{summary.compared} layers within tolerance"
        + (f"; first divergent: {first.describe()}" if first is not None else "")
    )
    return first is None

"""``repliscope diff MANIFEST --gradients PORT [--train-steps K]``: a Keras port's gradients (and ``K`` optimiser
steps) against libdarknet's own training, on pre-processed batches of a detection dataset
(:mod:`repliscope.diff.training`; docs: guides/training-diff)."""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from repliscope.cli.output import console
from repliscope.errors import RepliscopeError

if TYPE_CHECKING:
    from repliscope.diff.training.gradients import GradientDiffResult
    from repliscope.diff.training.steps import TrainingStepDiffResult


@dataclass(frozen=True)
class TrainingOptions:
    port: str
    mapping: Path | None
    train_steps: int
    batch: int
    bn: str
    bn_dtype: str
    seen: int | None
    dataset: str
    threads: int
    plot: Path | None
    db: str | None
    store: bool
    as_json: bool
    port_loss: str | None = None


def run_training_diff_cmd(manifest: str, opts: TrainingOptions) -> None:
    """Run, print (tables or ``{"gradient_diff": ..., "training_step_diff": ...}``), store; exit 0 (both within
    tolerance), 1 (a gradient or a step separates) or 2 (bad input, a port that raises / returns NaN / the wrong
    shape: one line)."""
    try:
        grad, steps, png = _run(manifest, opts)
    except RepliscopeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(code=2) from None
    ids: list[str] = []
    if opts.store:
        from repliscope.errors import StoreError
        from repliscope.store.diffs import save_diff

        try:
            ids.append(save_diff(opts.db, grad.model_dump(mode="json"), manifest_name=grad.manifest))
            if steps is not None:
                ids.append(save_diff(opts.db, steps.model_dump(mode="json"), manifest_name=steps.manifest, figure=png))
        except StoreError as exc:
            print(f"warning: the diff was not stored: {exc}", file=sys.stderr)
    if opts.as_json:
        out: dict[str, Any] = {"gradient_diff": grad.model_dump(mode="json")}
        if steps is not None:
            out["training_step_diff"] = steps.model_dump(mode="json")
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        _print(grad, steps)
        for diff_id in ids:
            console.print(f"stored as diff {diff_id[:12]} (repliscope diffs show {diff_id[:12]})")
    if not grad.passed or (steps is not None and not steps.passed):
        raise typer.Exit(code=1)


def _mapping(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    import yaml

    if not path.is_file():
        raise RepliscopeError(f"--mapping {path}: no such file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise RepliscopeError(f"--mapping {path}: not YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise RepliscopeError(
            f"--mapping {path}: a YAML mapping 'darknet_layer: keras_layer' or 'darknet_layer: {{conv, bn, output}}'"
        )
    return data


def _run(
    manifest: str, opts: TrainingOptions
) -> tuple[GradientDiffResult, TrainingStepDiffResult | None, bytes | None]:
    from repliscope.backends.darknet.training import MAX_TRAIN_BATCH, DarknetTrainer
    from repliscope.diff.training.batches import dataset_batches
    from repliscope.diff.training.gradients import run_gradient_diff
    from repliscope.diff.training.keras_port import BN_DTYPES, BN_MODES
    from repliscope.diff.training.port import load_port, registered_loss_upstream, yardstick
    from repliscope.diff.training.steps import loss_plot, run_training_diff
    from repliscope.diff.training.tfmg_port import check_cli_port, cli_port, is_cli_port, steps_plan
    from repliscope.evaluation.artifacts import resolve_artifact
    from repliscope.manifest.loader import load_manifest
    from repliscope.paths import default_cache_dir

    if opts.bn not in BN_MODES:
        raise RepliscopeError(f"--port-bn {opts.bn!r} (allowed: {', '.join(BN_MODES)})")
    if opts.bn_dtype not in BN_DTYPES:
        raise RepliscopeError(f"--bn-dtype {opts.bn_dtype!r} (allowed: {', '.join(BN_DTYPES)})")
    if not 1 <= opts.batch <= MAX_TRAIN_BATCH:
        raise RepliscopeError(f"--train-batch {opts.batch}: allowed 1..{MAX_TRAIN_BATCH}")
    if opts.train_steps < 0:
        raise RepliscopeError(f"--train-steps {opts.train_steps}: 0 (gradients only) or more")
    if is_cli_port(opts.port):
        check_cli_port(opts.port, opts.port_loss)
    if not Path(manifest).is_file():
        raise RepliscopeError(f"'{manifest}' is not a manifest file")
    mapping = _mapping(opts.mapping)
    loaded = load_manifest(manifest)
    artifact = resolve_artifact(loaded, default_cache_dir())
    if artifact.format != "darknet" or artifact.config_path is None:
        raise RepliscopeError(
            f"{manifest}: --gradients trains the original with libdarknet: source.format 'darknet' (.weights + "
            f"config .cfg), not '{artifact.format}'"
        )
    cfg, weights = Path(artifact.config_path), Path(artifact.path)
    name = loaded.manifest.name
    with tempfile.TemporaryDirectory(prefix="repliscope-train-") as work:
        trainer = DarknetTrainer(
            cfg, weights, batch=opts.batch, workdir=Path(work), threads=opts.threads, seen=opts.seen
        )
        oracle = DarknetTrainer(cfg, weights, batch=opts.batch, workdir=Path(work), threads=opts.threads)
        try:
            net = trainer.network
            count = max(1, opts.train_steps)
            batches = dataset_batches(opts.dataset, opts.batch, count, (net.width, net.height))
            values = trainer.params()
            port: Any
            if is_cli_port(opts.port):  # the Model Garden's own model, in its stack (gradients only)
                from repliscope.stacks.call import run_task

                plan = steps_plan(trainer, batches, opts.train_steps) if opts.train_steps else None
                port = cli_port(opts.port, net, cfg, weights, run_task, Path(work), plan)
            else:
                port = load_port(opts.port, net, values, bn=opts.bn, bn_dtype=opts.bn_dtype, mapping=mapping)
            first = batches[0]
            loss = None
            if opts.port_loss is not None:
                from repliscope.stacks.call import run_loss

                loss = (opts.port_loss, registered_loss_upstream(opts.port_loss, cfg, net, first.truth, run_loss))
            grad = run_gradient_diff(
                trainer,
                port,
                first.x,
                first.truth,
                yardstick=yardstick(net, values),
                manifest_name=name,
                dataset=opts.dataset,
                images=list(first.names),
                port_loss=loss,
            )
            steps = png = None
            if opts.train_steps:
                steps = run_training_diff(
                    trainer,
                    oracle,
                    port,
                    batches,
                    steps=opts.train_steps,
                    gradient=grad,
                    manifest_name=name,
                    dataset=opts.dataset,
                )
                png = loss_plot(steps)
                if opts.plot is not None:
                    opts.plot.write_bytes(png)
        finally:
            trainer.close()
            oracle.close()
    return grad, steps, png


def _print(grad: GradientDiffResult, steps: TrainingStepDiffResult | None) -> None:
    from rich.table import Table

    console.print(
        f"gradient diff: {grad.candidate} vs {grad.reference}, {grad.samples} image(s), batch {grad.batch}, "
        f"Darknet cost {grad.cost:.4g}"
    )
    for text in grad.conventions.values():
        console.print(f"  {text}")
    table = Table("layer", "param", "rel L2", "tolerance", "float32 sens.", "cosine", "|port|/|darknet|", "ok")
    for p in grad.params:
        sens = "" if p.float32_sensitivity is None else f"{p.float32_sensitivity:.3g}"
        table.add_row(
            p.layer,
            p.param,
            f"{p.rel_l2:.3g}",
            f"{p.tolerance:.3g}",
            sens,
            f"{p.cosine:.6f}",
            f"{p.norm_ratio:.4f}",
            "yes" if p.passed else "NO",
        )
    console.print(table)
    console.print(grad.summary)
    if steps is None:
        return
    table = Table("step", "lr", "darknet loss", "port loss", "rel", "tolerance", "lr changed")
    for r in steps.rows:
        table.add_row(
            str(r.step),
            f"{r.learning_rate:.3g}",
            f"{r.darknet_loss:.6g}",
            f"{r.port_loss:.6g}",
            f"{r.loss_rel:.3g}",
            f"{r.loss_tolerance:.3g}",
            "yes" if r.lr_changed else "",
        )
    console.print(table)
    for key in ("update", "learning_rate"):
        if key in steps.conventions:
            console.print(f"  {steps.conventions[key]}")
    console.print(steps.summary)

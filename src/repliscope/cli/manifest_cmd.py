"""``repliscope manifest validate|show``: model manifests."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from repliscope.cli.common import JsonOption, emit_json, fail
from repliscope.cli.output import console, print_table
from repliscope.errors import RepliscopeError

manifest_app = typer.Typer(help="Model manifests.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add the ``manifest`` command group to ``app``."""
    app.add_typer(manifest_app, name="manifest")


@manifest_app.command("validate")
def manifest_validate(files: Annotated[list[Path], typer.Argument(help="Manifest files.")]) -> None:
    """Check manifests against the schema and the op registry; every file is checked, exit 2 if any is invalid."""
    from repliscope.manifest.loader import load_manifest

    invalid = 0
    for f in files:
        try:
            loaded = load_manifest(f)
        except RepliscopeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            invalid += 1
            continue
        console.print(f"[green]ok[/] {f}: {loaded.manifest.name} {loaded.manifest.version}, "
                      f"{len(loaded.manifest.preprocess)} pre-processing ops, {len(loaded.manifest.claims)} claims")
    if invalid:
        raise typer.Exit(code=2)


@manifest_app.command("show")
def manifest_show(
    file: Path,
    resolved: Annotated[bool, typer.Option(help="Resolve every op (library + version), the model source and "
                                                "the framework check.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Print a manifest; with --resolved, exactly what a run would execute."""
    from repliscope.evaluation.artifacts import default_cache_dir, load_class_names, resolve_artifact
    from repliscope.manifest.loader import build_ops, load_manifest
    from repliscope.ops.base import BuildContext
    from repliscope.ops.pipeline import Pipeline

    try:
        loaded = load_manifest(file)
        out: dict[str, Any] = {"name": loaded.manifest.name, "version": loaded.manifest.version,
                               "sha256": loaded.sha256}
        if resolved:
            cache = default_cache_dir()
            artifact = resolve_artifact(loaded, cache)
            names = load_class_names(loaded, cache)
            pipeline = Pipeline(*build_ops(loaded, BuildContext(class_names=names)))
            out["source"] = {"path": str(artifact.path), "sha256": artifact.sha256, "verified": True,
                             "format": artifact.format}
            out["framework"] = {"name": loaded.manifest.framework.name,
                                "constraint": loaded.manifest.framework.version, "satisfied": True}
            out["pipeline"] = pipeline.describe()
        else:
            out["manifest"] = loaded.manifest.model_dump(mode="json")
    except RepliscopeError as exc:
        fail(exc)
        return
    if as_json or not resolved:
        emit_json(out)
        return
    console.print(f"[bold]{out['name']} {out['version']}[/] (manifest sha256 {out['sha256'][:12]})")
    console.print(f"source    {out['source']['path']} (sha256 verified)")
    console.print(f"framework {out['framework']['name']} {out['framework']['constraint']}: satisfied")
    for stage in ("preprocess", "postprocess"):
        rows = [[i, op["op"], op["library"], op["library_version"],
                 ", ".join(f"{k}={v}" for k, v in op.items() if k not in ("op", "library", "library_version"))]
                for i, op in enumerate(out["pipeline"][stage])]
        print_table(stage, ["#", "op", "library", "version", "parameters"], rows)

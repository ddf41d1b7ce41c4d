"""``repliscope manifest validate|show|hash|new``: model manifests."""

from __future__ import annotations

import stat
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from repliscope.cli.common import JsonOption, emit_json, fail
from repliscope.cli.output import console, print_table
from repliscope.errors import RepliscopeError

manifest_app = typer.Typer(help="Model manifests.", no_args_is_help=True)

OutsidePathsOption = Annotated[
    bool, typer.Option(help="Allow source/label paths outside the manifest's folder (local experiments).")
]


def register(app: typer.Typer) -> None:
    """Add the ``manifest`` command group to ``app``."""
    app.add_typer(manifest_app, name="manifest")


@manifest_app.command("validate")
def manifest_validate(
    files: Annotated[list[Path], typer.Argument(help="Manifest files.")],
    offline: Annotated[
        bool,
        typer.Option(
            help="Skip the checks that need the source file, installed packages "
            "or imports (hash, package lookup, versions, factory)."
        ),
    ] = False,
    download: Annotated[
        bool,
        typer.Option(
            help="You will evaluate with --download: an https source that is not "
            "cached yet is fine (nothing is downloaded here)."
        ),
    ] = False,
    allow_outside_paths: OutsidePathsOption = False,
) -> None:
    """Check manifests for everything `evaluate` would refuse before its first sample: schema, ops, cross-field
    and shape checks, the source (path policy, sha256), framework/package versions, the architecture factory and
    the labels. Every problem of every file is printed (file:line: field: message); exit 2 if any is invalid."""
    from repliscope.manifest.checks import check_manifest
    from repliscope.paths import default_cache_dir

    invalid = 0
    for f in files:
        report = check_manifest(
            f,
            cache_dir=default_cache_dir(),
            offline=offline,
            allow_download=download,
            allow_outside_paths=allow_outside_paths,
        )
        for warning in report.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        if not report.ok:
            for err in report.errors:
                print(f"error: {err}", file=sys.stderr)
            print(f"{f}: {len(report.errors)} problem{'s' if len(report.errors) > 1 else ''}", file=sys.stderr)
            invalid += 1
            continue
        assert report.loaded is not None
        m = report.loaded.manifest
        from repliscope.tasks.metric_text import count_of  # the manifest loaded the task registry already

        scope = " (offline: source, packages and imports not checked)" if offline else ""
        console.print(
            f"[green]ok[/] {f}: {m.name} {m.version}, {count_of(len(m.preprocess), 'pre-processing op')}, "
            f"{count_of(len(m.claims), 'claim')}{scope}",
            soft_wrap=True,
        )
    if invalid:
        raise typer.Exit(code=2)


@manifest_app.command("show")
def manifest_show(
    file: Path,
    resolved: Annotated[
        bool, typer.Option(help="Resolve every op (library + version), the model source and the framework check.")
    ] = False,
    allow_outside_paths: OutsidePathsOption = False,
    as_json: JsonOption = False,
) -> None:
    """Print a manifest as loaded (YAML; --json for JSON); with --resolved, exactly what a run would execute."""
    from repliscope.evaluation.artifacts import load_class_names, resolve_artifact
    from repliscope.manifest.loader import build_ops, load_manifest
    from repliscope.ops.base import BuildContext
    from repliscope.ops.pipeline import Pipeline
    from repliscope.paths import default_cache_dir

    try:
        loaded = load_manifest(file)
        out: dict[str, Any] = {
            "name": loaded.manifest.name,
            "version": loaded.manifest.version,
            "sha256": loaded.sha256,
        }
        if resolved:
            cache = default_cache_dir()
            artifact = resolve_artifact(loaded, cache, allow_outside_paths=allow_outside_paths)
            names = load_class_names(loaded, cache, allow_outside_paths=allow_outside_paths)
            pipeline = Pipeline(*build_ops(loaded, BuildContext(class_names=names)))
            out["source"] = {
                "path": str(artifact.path),
                "sha256": artifact.sha256,
                "verified": True,
                "format": artifact.format,
            }
            out["framework"] = {
                "name": loaded.manifest.framework.name,
                "constraint": loaded.manifest.framework.version,
                "satisfied": True,
            }
            out["pipeline"] = pipeline.describe()
        else:
            out["manifest"] = loaded.manifest.model_dump(mode="json")
    except RepliscopeError as exc:
        fail(exc)
        return
    for warning in loaded.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if as_json:
        emit_json(out)
        return
    if not resolved:
        import yaml

        sys.stdout.write(f"# {file}: {out['name']} {out['version']}, manifest sha256 {out['sha256']}\n")
        sys.stdout.write(yaml.safe_dump(out["manifest"], sort_keys=False, allow_unicode=True, width=110))
        return
    console.print(f"[bold]{out['name']} {out['version']}[/] (manifest sha256 {out['sha256'][:12]})")
    console.print(f"source    {out['source']['path']} (sha256 verified)")
    console.print(f"framework {out['framework']['name']} {out['framework']['constraint']}: satisfied")
    for stage in ("preprocess", "postprocess"):
        rows = [
            [
                i,
                op["op"],
                op["library"],
                op["library_version"],
                ", ".join(f"{k}={v}" for k, v in op.items() if k not in ("op", "library", "library_version")),
            ]
            for i, op in enumerate(out["pipeline"][stage])
        ]
        print_table(stage, ["#", "op", "library", "version", "parameters"], rows)


@manifest_app.command("hash")
def manifest_hash(
    target: Annotated[str, typer.Argument(help="A file path, or package://DIST/path/inside/the/distribution.")],
    as_json: JsonOption = False,
) -> None:
    """Print the sha256 of a file or of a package:// file (and the path it resolves to), for source.sha256.
    For an ``.onnx`` model with external data it is the hash over the model and its external data files."""
    from repliscope.manifest.checksums import source_file_sha256
    from repliscope.manifest.sources import locate_package_file

    try:
        if target.startswith("package://"):
            path = locate_package_file(target)
        elif "://" in target:
            raise RepliscopeError(f"{target}: hash a local file or a package:// URI (download https files first)")
        else:
            path = Path(target)
            if not path.is_file():
                raise RepliscopeError(f"{target}: {'a folder, not a file' if path.is_dir() else 'no such file'}")
        digest = source_file_sha256(path)  # an .onnx: over the model and its external data
    except (RepliscopeError, OSError) as exc:
        fail(exc)
        return
    if as_json:
        emit_json({"target": target, "path": str(path), "sha256": digest})
        return
    sys.stdout.write(f"{digest}  {target}\n")
    if target.startswith("package://"):
        sys.stdout.write(f"resolved to {path}\n")


@manifest_app.command("new")
def manifest_new(
    source: Annotated[
        str,
        typer.Option(
            help="The model file: package://DIST/path, or a path relative to the manifest's folder (.onnx, .pth, .pt)."
        ),
    ],
    out: Annotated[
        Path | None, typer.Option(help="Write the manifest here (refuses to overwrite); default: stdout.")
    ] = None,
    allow_outside_paths: OutsidePathsOption = False,
) -> None:
    """Scaffold a commented manifest from a model source: sha256, format, framework and (ONNX) input/output
    are filled in; every value only you know is a CHANGE-ME placeholder that `manifest validate` flags."""
    from repliscope.manifest.scaffold import scaffold
    from repliscope.paths import default_cache_dir

    base = out.parent if out is not None else Path.cwd()
    try:
        if out is not None and out.exists():
            raise RepliscopeError(f"{out} exists; choose another --out (nothing was overwritten)")
        if not base.is_dir():
            raise RepliscopeError(f"--out {out}: the folder {base} does not exist")
        text = scaffold(source, base, default_cache_dir(), allow_outside_paths=allow_outside_paths)
    except RepliscopeError as exc:
        fail(exc)
        return
    if out is None:
        sys.stdout.write(text)
        return
    out.write_text(text, encoding="utf-8")
    console.print(
        f"wrote {out}: fill in every CHANGE-ME, check the pre-processing, then repliscope manifest validate {out}",
        soft_wrap=True,
    )


@manifest_app.command("import")
def manifest_import(
    format_name: Annotated[str, typer.Argument(metavar="FORMAT", help="mlmodelscope | timm")],
    path: Annotated[Path, typer.Argument(help="The foreign config file, or a folder of them (with --out-dir).")],
    out: Annotated[
        Path | None, typer.Option(help="Write the manifest here (refuses to overwrite); default: stdout.")
    ] = None,
    out_dir: Annotated[Path | None, typer.Option(help="For a folder: write one manifest per file here.")] = None,
    timm_version: Annotated[
        str | None,
        typer.Option(
            help="timm: the release whose eval transform to reproduce (1.0.29, 1.0.30, 1.0.31; default the newest)."
        ),
    ] = None,
    test_size: Annotated[
        bool, typer.Option(help="timm: use test_input_size / test_crop_pct, as timm's validate.py does.")
    ] = False,
    labels: Annotated[
        Path | None,
        typer.Option(
            help="mlmodelscope: your copy of a features_url file the importer does not know; used where its MD5 "
            "is the manifest's features_checksum."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Translate a foreign model config (an MLModelScope manifest, a timm config.json) into a repliscope manifest
    that reproduces what that tool ran; what cannot be translated exactly is a warning (stable code) and a YAML
    comment. Every translation is checked with `manifest validate --offline`."""
    from repliscope.importers.batch import coverage, import_folder, import_one, make_importer
    from repliscope.importers.reading import file_kind

    options = {"timm_version": timm_version, "test_size": test_size, "labels": labels}
    try:
        make_importer(format_name, options)  # an unknown format or option is named before the file is looked at
        try:  # stat, not open: never blocks on a FIFO
            mode = path.stat().st_mode
        except FileNotFoundError:
            raise RepliscopeError(f"{path}: no such file or folder") from None
        except OSError as exc:
            raise RepliscopeError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise RepliscopeError(
                f"{path}: not a regular file ({file_kind(mode)}); give the foreign config file or a folder of them"
            )
        if path.is_dir():
            if out_dir is None:
                raise RepliscopeError(f"{path} is a folder: give --out-dir DIR for the translated manifests")
            rows = import_folder(format_name, path, out_dir, options)
            if as_json:
                emit_json([row.to_json() for row in rows])
            else:
                for r in rows:  # one line per file: long paths and code lists wrap as text, not in cells
                    colour = {"translated": "green", "with warnings": "yellow"}.get(r.outcome, "red")
                    console.print(
                        f"[{colour}]{r.outcome}[/] {r.file}"
                        + (
                            f" ({len(r.warnings)} warnings: {r.detail})"
                            if r.warnings
                            else f": {r.detail}"
                            if r.detail
                            else ""
                        ),
                        highlight=False,
                        soft_wrap=True,
                    )
                _print_coverage(format_name, rows, coverage(rows))
                counts = {k: sum(r.outcome == k for r in rows) for k in ("translated", "with warnings", "refused")}
                console.print(
                    ", ".join(f"{v} {k}" for k, v in counts.items()) + f"; written to {out_dir}",
                    highlight=False,
                    soft_wrap=True,
                )
            return
        if out is not None and out.exists():
            raise RepliscopeError(f"{out} exists; choose another --out (nothing was overwritten)")
        result = import_one(format_name, path, options)
    except RepliscopeError as exc:
        fail(exc)
        return
    if as_json:
        emit_json(result.to_json())
    elif out is None:
        sys.stdout.write(result.to_yaml())
    if out is not None:
        out.write_text(result.to_yaml(), encoding="utf-8")
        if not as_json:
            console.print(f"wrote {out} ({len(result.warnings)} warnings)", soft_wrap=True)
    for w in result.warnings:
        if not as_json:
            print(f"warning: {w.code} {w.field}: {w.message}", file=sys.stderr)


def _print_coverage(format_name: str, rows: list[Any], counts: list[tuple[str, int]]) -> None:
    """The coverage table of a folder import: files per outcome and per refusal reason, with its meaning."""
    from repliscope.importers.base import IMPORTERS

    meanings: dict[str, str] = {
        "translated": "translated exactly, no warning",
        "with warnings": "translated; each inexact point is a warning (see the file)",
    }
    rules = IMPORTERS.get(format_name).refusal_reasons
    total = len(rows)
    table = [
        [k, n, f"{100 * n / total:.1f} %", meanings.get(k) or rules.get(k.removeprefix("refused: "), "")]
        for k, n in counts
    ]
    print_table(f"coverage: {total} files", ["outcome", "files", "share", "meaning"], table)

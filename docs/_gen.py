"""Generate the reference pages from the code: run by ``docs/conf.py`` before Sphinx reads the sources.

Writes MyST markdown into ``docs/reference/_generated/`` (git-ignored), included by the pages of
``docs/reference/``:

- ``cli.md``: every command of ``repliscope.cli.main.app`` (walked through ``typer.main.get_command``): usage,
  help and every parameter with its help and default;
- ``rest.md``: the FastAPI app's OpenAPI document (``create_app`` on a temporary SQLite store): endpoints and
  their parameters, bodies and responses, then the schemas;
- ``manifest-schema.md``: the manifest's pydantic JSON Schema (``Manifest.model_json_schema()``), one table per
  model;
- ``ops.md``: the processing-op registry (name, stage, docstring, parameters from each op's ``Params`` model);
- ``registries.md``: every other plugin registry (tasks, runtimes, datasets, label rules, metrics, pitfalls,
  importers, bench scenarios, conversions, multi-graph ONNX models, layer-diff candidates, tracing instruments)
  with each entry's first docstring line, and the backends;
- ``exit-codes.md``: the CLI's exit codes (``repliscope.cli.guard``).

Nothing here reaches the network. Run it alone with ``python docs/_gen.py`` to look at the output.
"""

from __future__ import annotations

import inspect
import json
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "reference" / "_generated"

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|data|attr|mod|obj|exc|const):`~?([^`]+)`")


def text(doc: str | None) -> str:
    """A docstring as markdown: dedented, Sphinx roles (``:class:`~a.B```) turned into code spans."""
    if not doc:
        return ""
    doc = inspect.cleandoc(doc)
    doc = _ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1] if '~' in m.group(0) else m.group(1)}`", doc)
    return doc


# a code span (any run of backticks up to the same run) or an option token outside one
_SPAN_OR_OPTION = re.compile(r"(`+).*?\1|(?<![\w-])(--[a-z][a-z0-9-]*)", re.DOTALL)


def options_as_code(help_text: str) -> str:
    """Help text with every ``--option`` mention as a code span, so it is copied as typed (never as an en dash)."""
    return _SPAN_OR_OPTION.sub(lambda m: f"`{m.group(2)}`" if m.group(2) else m.group(0), help_text)


def first_line(doc: str | None) -> str:
    """The first paragraph of a docstring, on one line."""
    return " ".join(text(doc).split("\n\n", 1)[0].split())


def cell(value: object) -> str:
    """A markdown table cell: one line, ``|`` escaped."""
    return " ".join(str(value).split()).replace("|", "\\|")


def code(value: object) -> str:
    """``value`` as an inline code span (backticks inside are doubled around)."""
    s = " ".join(str(value).split())
    return f"`` {s} ``" if "`" in s else f"`{s}`"


def table(header: list[str], rows: Iterable[list[str]]) -> str:
    rows = list(rows)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


# ---------------------------------------------------------------------------------------------- CLI (typer)


def cli_reference() -> str:
    """Every command of the ``repliscope`` app, depth first, in the order ``repliscope --help`` lists them."""
    import typer.main

    from repliscope.cli.main import app

    root = typer.main.get_command(app)
    out: list[str] = []

    def walk(cmd: Any, ctx: Any, path: list[str]) -> None:
        name = " ".join(path)
        if len(path) > 1:
            out.append(f"(cli-{slug(name)})=\n{'#' * min(len(path) + 1, 4)} `{name}`\n")
        usage = re.sub(r"\{(\w+)\}", lambda m: m.group(1).upper(), cmd.get_usage(ctx).removeprefix("Usage: "))
        out.append(f"```text\n{usage}\n```\n")
        if cmd.help:
            out.append(options_as_code(text(cmd.help)) + "\n")
        params = [p for p in cmd.params if not p.hidden and p.name != "help"]
        if params:
            for p in params:
                if p.param_type_name == "argument":
                    req = "required" if p.required else "optional"
                    arg_help = options_as_code(text(getattr(p, "help", "") or ""))
                    out.append(f"- {code(p.name.upper())} (argument, {req}): {arg_help}")
                else:
                    record = p.get_help_record(ctx)
                    if record is None:
                        continue
                    opts, help_text = record
                    out.append(f"- {code(opts)}: {options_as_code(' '.join(help_text.split()))}")
            out.append("")
        # the group's own API: the root group imports each command's module only when get_command asks for it
        names = cmd.list_commands(ctx) if hasattr(cmd, "list_commands") else []
        for sub_name in sorted(names) if len(path) == 1 else names:
            sub = cmd.get_command(ctx, sub_name)
            if sub is None or sub.hidden:
                continue
            walk(sub, sub.context_class(sub, info_name=sub_name, parent=ctx), [*path, sub_name])

    walk(root, root.context_class(root, info_name="repliscope"), ["repliscope"])
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------- REST (OpenAPI)


_LINK_PREFIX: list[str] = []
"""While set (its last item), a ``$ref`` type is written as a link to that page's ``PREFIX-model`` section."""


def _schema_type(schema: dict[str, Any]) -> str:
    """A JSON Schema fragment as a short type: ``string``, ``integer``, ``array of RunSummary``, ``A | null``."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_LINK_PREFIX[-1]}-{slug(name)})" if _LINK_PREFIX else name
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(_schema_type(s) for s in schema[key])
    if "allOf" in schema:
        return " & ".join(_schema_type(s) for s in schema["allOf"])
    if "enum" in schema:
        return " \\| ".join(json.dumps(v) for v in schema["enum"]).replace("\\|", "|")
    if "const" in schema:
        return json.dumps(schema["const"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_schema_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema and isinstance(schema["additionalProperties"], dict):
        return f"object of {_schema_type(schema['additionalProperties'])}"
    if isinstance(kind, list):
        return " | ".join(kind)
    return str(kind)


def _constraints(schema: dict[str, Any]) -> str:
    parts = []
    for key, label in (
        ("minimum", ">="),
        ("maximum", "<="),
        ("exclusiveMinimum", ">"),
        ("exclusiveMaximum", "<"),
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("minItems", "min items"),
        ("maxItems", "max items"),
        ("pattern", "pattern"),
    ):
        if key in schema:
            parts.append(f"{label} {code(schema[key])}")
    if "default" in schema:
        parts.append(f"default {code(json.dumps(schema['default']))}")
    return ", ".join(parts)


def schema_tables(defs: dict[str, dict[str, Any]], anchor_prefix: str) -> list[str]:
    """One section per model of a JSON Schema ``$defs`` / ``components.schemas``: field, type, required, notes."""
    out: list[str] = []
    for name in sorted(defs):
        schema = defs[name]
        out.append(f"({anchor_prefix}-{slug(name)})=\n### {name}\n")
        if schema.get("description"):
            out.append(text(schema["description"]) + "\n")
        props = schema.get("properties")
        if props:
            required = set(schema.get("required", ()))
            rows = [
                [
                    code(field),
                    _schema_type(p),
                    "yes" if field in required else "",
                    " ".join(x for x in (p.get("description", ""), _constraints(p)) if x),
                ]
                for field, p in props.items()
            ]
            out.append(table(["field", "type", "required", "description"], rows))
        elif "enum" in schema:
            out.append("One of: " + ", ".join(code(json.dumps(v)) for v in schema["enum"]) + "\n")
        else:
            out.append(f"Type: {_schema_type(schema)}\n")
    return out


def openapi_document() -> dict[str, Any]:
    """The service's OpenAPI document, from ``create_app`` on a throw-away SQLite store (nothing is started)."""
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig

    with tempfile.TemporaryDirectory() as tmp:
        config = ServiceConfig(db_url=f"sqlite:///{tmp}/docs.db", cache_dir=Path(tmp) / "cache")
        app = create_app(config)
        try:
            return app.openapi()
        finally:
            app.state.store.close()


def rest_reference() -> str:
    _LINK_PREFIX.append("rest-schema")
    try:
        return _rest_reference(openapi_document())
    finally:
        _LINK_PREFIX.pop()


def _rest_reference(doc: dict[str, Any]) -> str:
    out = [
        "# REST API\n",
        f"Generated from the service's OpenAPI document ({doc['info']['title']} {doc['info']['version']}); a "
        "running server serves the same document at `/openapi.json` and an interactive page at `/docs`. "
        'Send `Authorization: Bearer <token>`; every error is JSON `{"error": {"message", "field", '
        '"code"}}` (see {doc}`/guides/service`).\n',
        "## Endpoints\n",
    ]
    ops = [
        (path, method, op)
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if method in {"get", "post", "put", "patch", "delete"}
    ]
    out.append(
        table(
            ["method", "path", "summary"],
            [
                [method.upper(), f"[{code(path)}](#{_op_anchor(method, path)})", op.get("summary", "")]
                for path, method, op in ops
            ],
        )
    )
    for path, method, op in ops:
        out.append(f"({_op_anchor(method, path)})=\n### {method.upper()} `{path}`\n")
        description = op.get("description") or op.get("summary", "")
        if description:
            out.append(text(description) + "\n")
        params = op.get("parameters", [])
        if params:
            out.append(
                table(
                    ["parameter", "in", "type", "required", "description"],
                    [
                        [
                            code(p["name"]),
                            p["in"],
                            _schema_type(p.get("schema", {})),
                            "yes" if p.get("required") else "",
                            " ".join(x for x in (p.get("description", ""), _constraints(p.get("schema", {}))) if x),
                        ]
                        for p in params
                    ],
                )
            )
        body = op.get("requestBody")
        if body:
            kinds = [f"{code(ct)}: {_schema_type(c.get('schema', {}))}" for ct, c in body.get("content", {}).items()]
            out.append("Request body: " + "; ".join(kinds) + "\n")
        responses = op.get("responses", {})
        if responses:
            rows = []
            for status, response in responses.items():
                content = response.get("content", {})
                types = "; ".join(
                    f"{code(ct)} {_schema_type(c.get('schema', {}))}".strip() for ct, c in content.items()
                )
                rows.append([status, response.get("description", ""), types])
            out.append(table(["status", "description", "body"], rows))
    out.append("## Schemas\n")
    out += schema_tables(doc.get("components", {}).get("schemas", {}), "rest-schema")
    return "\n".join(out)


def _op_anchor(method: str, path: str) -> str:
    return slug(f"rest-{method}-{path}")


# ---------------------------------------------------------------------------------------------- manifest schema


def manifest_schema_reference() -> str:
    _LINK_PREFIX.append("manifest-schema")
    try:
        return _manifest_schema_reference()
    finally:
        _LINK_PREFIX.pop()


def _manifest_schema_reference() -> str:
    from repliscope.manifest.schema import Manifest

    schema = Manifest.model_json_schema()
    defs = schema.pop("$defs", {})
    out = [
        "# Manifest schema\n",
        "Generated from the pydantic model `repliscope.manifest.schema.Manifest` (its JSON Schema). Unknown "
        "keys are errors everywhere. The processing ops' own parameters are on {doc}`ops`; the walkthrough "
        "is {doc}`/guides/manifest`.\n",
        "## Manifest (top level)\n",
    ]
    required = set(schema.get("required", ()))
    out.append(
        table(
            ["field", "type", "required", "description"],
            [
                [
                    code(f),
                    _schema_type(p),
                    "yes" if f in required else "",
                    " ".join(x for x in (p.get("description", ""), _constraints(p)) if x),
                ]
                for f, p in schema.get("properties", {}).items()
            ],
        )
    )
    out.append("## Models\n")
    out += schema_tables(defs, "manifest-schema")
    out.append("## The JSON Schema\n")
    out.append("```json\n" + json.dumps(Manifest.model_json_schema(), indent=1) + "\n```\n")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------- registries


def ops_reference() -> str:
    import repliscope.ops  # noqa: F401  (registers every op)
    from repliscope.ops.base import OPS

    out = [
        "# Processing ops\n",
        "Generated from the op registry (`repliscope.ops.base.OPS`): the word a manifest's `preprocess:` / "
        "`postprocess:` entry names in `op:`, the stage, what the op does (its docstring) and its "
        "parameters (its `Params` model). Every parameter not marked optional must be written out.\n",
    ]
    out.append(
        table(
            ["op", "stage", "summary"],
            [[f"[{code(n)}](#op-{slug(n)})", OPS.get(n).stage, first_line(OPS.get(n).__doc__)] for n in OPS.names()],
        )
    )
    for name in OPS.names():
        cls = OPS.get(name)
        out.append(f"(op-{slug(name)})=\n## `{name}` ({cls.stage})\n")
        out.append(text(cls.__doc__) + "\n")
        params = getattr(cls, "Params", None)
        schema = params.model_json_schema() if params is not None else {}
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", ()))
            rows = [
                [
                    code(field),
                    _schema_type(p),
                    "yes" if field in required else "no",
                    " ".join(x for x in (p.get("description", ""), _constraints(p)) if x),
                ]
                for field, p in props.items()
            ]
            out.append(table(["parameter", "type", "required", "notes"], rows))
            nested = schema.get("$defs", {})
            if nested:
                out.append(f"Types used by `{name}`'s parameters:\n")
                out += [line.replace("\n### ", "\n#### ", 1) for line in schema_tables(nested, f"op-{slug(name)}")]
    return "\n".join(out)


def _registry_section(title: str, names: list[str], get: Callable[[str], Any], what: str) -> list[str]:
    rows = []
    from repliscope.errors import RepliscopeError

    for n in names:
        try:
            obj = get(n)
        except RepliscopeError as exc:  # a plugin whose extra is not installed where the docs are built
            rows.append([code(n), f"(not importable where these docs were built: {exc})"])
            continue
        doc = getattr(obj, "description", None) if isinstance(getattr(obj, "description", None), str) else None
        rows.append([code(n), doc or first_line(obj.__doc__)])
    return [f"(registries-{slug(title)})=\n## {title}\n", what + "\n", table(["name", "description"], rows)]


def pitfall_degrees_section() -> list[str]:
    """The variants with parameters: each parameter, its allowed degrees and the default (what the bare name runs)."""
    from repliscope.pitfalls.degrees import pitfall_listing

    rows = [
        [code(p["name"]), code(q["name"]), q["description"], q["values"], q["default"]]
        for p in pitfall_listing()
        for q in p["parameters"]
    ]
    return [
        "(registries-pitfall-degrees)=\n### Pitfall degrees\n",
        "A mistake with a degree is one variant with parameters. The bare name runs the default degree; "
        "`--variant 'NAME[PARAMETER=VALUE, ...]'` runs exactly the degree a pipeline diff names, in the notation "
        "it prints (`center_crop_offset[offset=[1, 0]]`; a value is a number, a word or a list). The allowed "
        "degrees are the ones the diff's diagnosis tries on the manifest's pipeline (a pitfall sweep refuses any "
        "other, listing them); in words:\n",
        table(["variant", "parameter", "what it is", "allowed degrees", "default"], rows),
    ]


def registries_reference() -> str:
    # each registry is complete on first read (tests/test_registries.py): nothing to import to fill them
    from repliscope.backends import CONVERSIONS, ONNX_MODELS
    from repliscope.bench.scenarios import SCENARIO_LOOPS
    from repliscope.datasets.base import DATASETS, LABEL_RULES
    from repliscope.diff.base import CANDIDATES
    from repliscope.importers.base import IMPORTERS
    from repliscope.metrics.classification import METRICS
    from repliscope.pitfalls.base import PITFALLS
    from repliscope.runtimes.base import RUNTIMES
    from repliscope.tasks.base import TASKS
    from repliscope.tracing.instruments import INSTRUMENTS

    out = [
        "# Registries\n",
        "Generated from the plugin registries (`repliscope.registry.Registry`): one per plugin kind, keyed by "
        "the word a manifest or the command line uses. An unknown name is an error that lists these and "
        "suggests the closest.\n",
    ]
    out += _registry_section("Tasks", TASKS.names(), TASKS.get, "The manifest's `task`.")
    out += _registry_section("Runtimes", RUNTIMES.names(), RUNTIMES.get, "`--runtime NAME`.")
    out += _registry_section(
        "Datasets",
        DATASETS.names(),
        DATASETS.get,
        "`--dataset NAME` or `--dataset NAME:PATH`; a plain folder goes through `image_folder`.",
    )
    out += _registry_section("Label rules", LABEL_RULES.names(), LABEL_RULES.get, "`--label-rule NAME`.")
    out += _registry_section("Metrics", METRICS.names(), METRICS.get, "Classification metrics a claim may name.")
    rows = [
        [code(n), ", ".join(PITFALLS.get(n).tasks or ()) or "every task", PITFALLS.get(n).description]
        for n in PITFALLS.names()
    ]
    out += [
        "(registries-pitfalls)=\n## Pitfalls\n",
        "`repliscope pitfalls --variant NAME` (see {doc}`/guides/pitfalls`).\n",
        table(["name", "tasks", "the one change"], rows),
    ]
    out += pitfall_degrees_section()
    out += _registry_section("Importers", IMPORTERS.names(), IMPORTERS.get, "`repliscope manifest import NAME FILE`.")
    out += _registry_section(
        "Bench scenarios", SCENARIO_LOOPS.names(), SCENARIO_LOOPS.get, "`repliscope bench --scenario NAME`."
    )
    out += _registry_section(
        "Conversions",
        CONVERSIONS.names(),
        CONVERSIONS.get,
        "`SOURCE->TARGET`: how an ONNX runtime runs a source of another format (through one verified cache).",
    )
    out += _registry_section(
        "ONNX models",
        ONNX_MODELS.names(),
        ONNX_MODELS.get,
        "Source formats that are several ONNX graphs driven by code (the manifest's `source.format`).",
    )
    out += _registry_section(
        "Layer-diff candidates", CANDIDATES.names(), CANDIDATES.get, "The formats a layer diff compares."
    )
    out += _registry_section(
        "Tracing instruments", INSTRUMENTS.names(), INSTRUMENTS.get, "The runtimes a `--trace-level` run traces."
    )
    from repliscope.diff.augment.contract import AUGMENTATIONS
    from repliscope.diff.layers.candidate_format import CANDIDATE_FORMATS
    from repliscope.diff.loss.contract import LOSSES
    from repliscope.diff.loss.pitfalls import LOSS_PITFALLS
    from repliscope.job_kinds import JOB_KINDS

    out += [
        "(registries-candidate-formats)=\n## Candidate formats\n",
        "`repliscope diff MANIFEST --candidate X --candidate-format NAME` (default: detected).\n",
        table(
            ["format", "description"],
            [[code(n), cell(CANDIDATE_FORMATS.get(n).description)] for n in CANDIDATE_FORMATS.names()],
        ),
    ]
    out += [
        "(registries-job-kinds)=\n## Job kinds\n",
        "What a service job or `evaluate --scheduler` runs (`POST /api/v1/jobs` `kind`).\n",
        table(["kind", "what it runs"], [[code(n), cell(JOB_KINDS.get(n).summary)] for n in JOB_KINDS.names()]),
    ]
    out += [
        "(registries-losses)=\n## Original losses\n",
        "`repliscope diff MANIFEST --loss CANDIDATE --original NAME` (see {doc}`/guides/loss-diff`).\n",
        table(
            ["name", "family", "original", "stack"],
            [
                [code(n), LOSSES.get(n).family, cell(LOSSES.get(n).origin), cell(LOSSES.get(n).stack or "this one")]
                for n in LOSSES.names()
            ],
        ),
    ]
    out += _registry_section(
        "Loss pitfalls", LOSS_PITFALLS.names(), LOSS_PITFALLS.get, "What the loss diff's diagnosis can name."
    )
    out += [
        "(registries-augmentations)=\n## Training augmentations\n",
        "`repliscope diff MANIFEST --augment CANDIDATE --augment-pipeline NAME` "
        "(see {doc}`/guides/augmentation-diff`).\n",
        table(
            ["name", "ops, in order", "original"],
            [
                [code(n), ", ".join(op.name for op in AUGMENTATIONS.get(n).ops), cell(AUGMENTATIONS.get(n).origin)]
                for n in AUGMENTATIONS.names()
            ],
        ),
    ]
    from repliscope.backends import backends

    rows = [
        [
            code(b.name),
            ", ".join(code(r.name) for r in b.runtimes),
            ", ".join(f"{code(f)} (`{r}`)" for f, r in b.frameworks.items()),
            ", ".join(code(c) for c in [*(r.name for r in b.runtimes if r.candidate), *b.candidates]),
            ", ".join(code(r.name) for r in b.runtimes if r.instrument),
        ]
        for b in backends()
    ]
    out += [
        "(registries-backends)=\n## Backends\n",
        "One folder per framework, `repliscope/backends/NAME/`, whose entry fills the runtime, layer-diff candidate "
        "and tracing registries and the provenance tables.\n",
        table(["backend", "runtimes", "manifest frameworks (native runtime)", "layer-diff candidates", "traced"], rows),
    ]
    return "\n".join(out)


def exit_codes_reference() -> str:
    from repliscope.cli import guard

    meaning = {
        "EXIT_OK": "the command did what was asked",
        "EXIT_FAILED": "the command ran, but its result is a failure",
        "EXIT_BAD_INPUT": "bad input: one line `error: <message>` on stderr",
        "EXIT_INTERNAL": "an internal error (a bug); the traceback is saved to a file whose path is printed",
        "EXIT_INTERRUPTED": "interrupted (Ctrl-C)",
    }
    codes = {name: value for name, value in vars(guard).items() if name.startswith("EXIT_")}
    unknown = set(codes) - set(meaning)
    if unknown:
        raise SystemExit(f"docs/_gen.py: describe the new exit codes {sorted(unknown)} in exit_codes_reference()")
    rows = [[code(value), code(name), meaning[name]] for name, value in sorted(codes.items(), key=lambda kv: kv[1])]
    return table(["code", "constant (`repliscope.cli.guard`)", "meaning"], rows)


PAGES: dict[str, Callable[[], str]] = {
    "cli.md": cli_reference,
    "rest.md": rest_reference,
    "manifest-schema.md": manifest_schema_reference,
    "ops.md": ops_reference,
    "registries.md": registries_reference,
    "exit-codes.md": exit_codes_reference,
}


def generate(out: Path = OUT) -> list[Path]:
    """Write every generated page (only when its text changed, so Sphinx rebuilds only what changed)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in PAGES.items():
        path = out / name
        content = build().rstrip() + "\n"
        if not path.exists() or path.read_text(encoding="utf-8") != content:
            path.write_text(content, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for p in generate():
        print(p)

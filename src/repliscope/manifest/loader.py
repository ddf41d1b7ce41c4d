"""Load a manifest file: YAML -> schema -> built pipeline, with every error pointing at file:line.

Every problem of a file is reported at once (:class:`ManifestErrors`): all schema errors, every op entry, then
the cross-field and static shape checks. Limits: :data:`MAX_MANIFEST_BYTES` for the file, and the YAML limits
of :mod:`repliscope.manifest.yaml_lines` (safe tags only, bounded alias expansion and nesting).
"""

from __future__ import annotations

import hashlib
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from repliscope.errors import ManifestError, OpSpecError, RepliscopeError, raise_collected
from repliscope.limits import MANIFEST_BYTES, MAX_PIXELS, TENSOR_BYTES
from repliscope.manifest.limits import check_numbers
from repliscope.manifest.schema import Manifest
from repliscope.manifest.yaml_lines import Path_, format_path, line_of, load_with_lines
from repliscope.ops.base import BuildContext, Op, PostOp, PreOp, StaticShape

MAX_MANIFEST_BYTES = MANIFEST_BYTES.default
"""1 MiB: a manifest is stored with every run; a real one is a few KiB."""

_M = TypeVar("_M", bound=BaseModel)

PLACEHOLDER = "CHANGE-ME"
"""Prefix of the values ``repliscope manifest new`` leaves for the author; each one is an error until replaced."""


@dataclass
class LoadedManifest:
    """A validated manifest with its provenance (path, text, sha256), the line of every field and the
    warnings of the load (``file:line: field 'x': message`` strings; they never stop a run)."""

    manifest: Manifest
    path: Path
    text: str
    sha256: str
    lines: dict[Path_, int] = field(repr=False)
    warnings: list[str] = field(default_factory=list)

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def error(self, message: str, field_path: Path_, allowed: list[str] | None = None) -> ManifestError:
        return ManifestError(
            message,
            file=str(self.path),
            line=line_of(field_path, self.lines),
            field=format_path(field_path),
            allowed=allowed,
        )


@dataclass
class Inspection:
    """Every problem of one manifest file (``errors``, in line order). ``loaded`` is set whenever the schema
    validated, even with op or cross-field errors; ``data``/``lines`` whenever the YAML parsed to a mapping,
    so that checks of the sections that are valid (:meth:`section`) can still run."""

    path: Path
    errors: list[ManifestError]
    loaded: LoadedManifest | None = None
    data: dict[str, Any] | None = None
    lines: dict[Path_, int] = field(default_factory=dict, repr=False)

    def section(self, name: str, model: type[_M]) -> _M | None:
        """The top-level section ``name`` validated as ``model``; None if absent or invalid."""
        if self.loaded is not None:
            value = getattr(self.loaded.manifest, name)
            return value if isinstance(value, model) else None
        raw = (self.data or {}).get(name)
        try:
            return model.model_validate(raw) if raw is not None else None
        except ValidationError:
            return None

    def error(self, message: str, field_path: Path_, allowed: list[str] | None = None) -> ManifestError:
        return ManifestError(
            message,
            file=str(self.path),
            line=line_of(field_path, self.lines),
            field=format_path(field_path),
            allowed=allowed,
        )


def load_manifest(path: str | Path) -> LoadedManifest:
    """Read and validate ``path``. Raises ManifestError naming file, line, field and allowed values
    (:class:`ManifestErrors` when there are several problems: all of them, in line order)."""
    found = inspect_manifest(path)
    raise_collected(found.errors)
    assert found.loaded is not None
    return found.loaded


def inspect_manifest(path: str | Path) -> Inspection:
    """Every problem of ``path``; never raises for a bad file (see :class:`Inspection`)."""
    p = Path(path)
    found = Inspection(p, [])
    try:
        _inspect(p, found)
    except ManifestError as exc:
        found.errors = exc.errors
    found.errors.sort(key=lambda e: e.line or 0)
    return found


def _inspect(p: Path, found: Inspection) -> None:
    try:
        if p.is_file() and p.stat().st_size > MAX_MANIFEST_BYTES:
            raise ManifestError(
                f"the manifest is {p.stat().st_size} bytes, more than the {MAX_MANIFEST_BYTES} "
                "(1 MiB) a manifest may have; model files belong in source.uri",
                file=str(p),
            )
        raw = p.read_bytes()
    except OSError as exc:
        raise ManifestError(f"cannot read manifest: {exc.strerror or exc}", file=str(p)) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(
            f"not UTF-8 text (byte {exc.start}: {raw[exc.start : exc.start + 1]!r})", file=str(p)
        ) from None
    data, lines = load_with_lines(text, str(p))
    if not isinstance(data, dict):
        raise ManifestError(
            "the manifest must be a mapping of fields", file=str(p), line=1, allowed=list(Manifest.model_fields)
        )
    found.data, found.lines = data, lines
    errors = found.errors
    placeholders = dict(_placeholders(data, ()))
    errors.extend(
        ManifestError(
            f"still the placeholder of `repliscope manifest new`: {text!r}; write the real value",
            file=str(p),
            line=line_of(at, lines),
            field=format_path(at),
        )
        for at, text in placeholders.items()
    )
    numbers = check_numbers(data, str(p), lines)  # NaN, inf, 1e400, 10**400: in any field
    errors.extend(numbers)
    taken = {format_path(at) for at in placeholders} | {e.field for e in numbers}
    manifest: Manifest | None = None
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        errors.extend(e for e in _schema_errors(exc, str(p), lines) if e.field not in taken)
    # op entries are checked against the op registry even when other fields are wrong: all errors at once
    op_errors: list[ManifestError] = []
    pre, post = _build_raw_ops(data, str(p), lines, op_errors)
    errors.extend(e for e in op_errors if e.field not in taken)
    ops_ok = not op_errors and not any((e.field or "").startswith(("preprocess", "postprocess")) for e in numbers)
    digest = hashlib.sha256(raw).hexdigest()
    if manifest is not None:
        loaded = found.loaded = LoadedManifest(manifest, p, text, digest, lines)
        loaded.warnings.extend(_claim_warnings(loaded))
    else:  # the cross-field checks need only these sections: run them when those validate on their own
        partial = _partial_manifest(data)
        if partial is None:
            return
        loaded = LoadedManifest(partial, p, text, digest, lines)
    errors.extend(_check_tensor_sizes(loaded))
    if ops_ok:  # with an op missing, the cross-field and shape checks would report follow-up errors
        errors.extend(_check_consistency(loaded, [op.name for op in pre], post))
        errors.extend(_check_pixels(loaded, pre))
        errors.extend(_check_shapes(loaded, pre))


def _partial_manifest(data: Mapping[str, Any]) -> Manifest | None:
    """A Manifest holding only the validated ``task``, ``inputs``, ``outputs``, ``labels`` and ``preprocess``
    (what the cross-field and shape checks read), or None when one of them is itself invalid (the schema
    reports it)."""
    from repliscope.manifest.schema import LabelsSpec, OutputSpec, TensorSpec

    try:
        inputs = [TensorSpec.model_validate(x) for x in data.get("inputs") or []]
        outputs = [OutputSpec.model_validate(x) for x in data.get("outputs") or []]
        labels = LabelsSpec.model_validate(data.get("labels"))
    except ValidationError:
        return None
    preprocess = data.get("preprocess")
    task = data.get("task")
    from repliscope.tasks.base import TASKS

    if len(inputs) != 1 or not outputs or not isinstance(preprocess, list) or not isinstance(task, str):
        return None
    if task not in TASKS or (TASKS.get(task).class_scores and len(outputs) != 1):
        return None
    return Manifest.model_construct(inputs=inputs, outputs=outputs, labels=labels, preprocess=preprocess, task=task)


def _placeholders(value: Any, at: Path_) -> typing.Iterator[tuple[Path_, str]]:
    """(path, text) of every string value that starts with :data:`PLACEHOLDER`."""
    if isinstance(value, str) and value.startswith(PLACEHOLDER):
        yield at, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _placeholders(item, (*at, str(key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _placeholders(item, (*at, i))


def _build_raw_ops(
    data: Mapping[str, Any], file: str, lines: dict[Path_, int], errors: list[ManifestError]
) -> tuple[list[PreOp], list[PostOp]]:
    """Build every op entry of the raw data; append one error per bad entry."""
    from repliscope.ops.pipeline import build_op

    labels = data.get("labels")
    count = labels.get("num_classes") if isinstance(labels, dict) else None
    n = count if isinstance(count, int) and 0 < count <= 1_000_000 else 1
    context = BuildContext(class_names=tuple(f"class_{i}" for i in range(n)))
    built: dict[str, list[Op]] = {"preprocess": [], "postprocess": []}
    for section, stage in (("preprocess", "pre"), ("postprocess", "post")):
        entries = data.get(section)
        if not isinstance(entries, list):
            continue  # the schema reports it
        for i, spec in enumerate(entries):
            if not isinstance(spec, dict):
                errors.append(
                    ManifestError(
                        f"an op entry is a mapping like {{op: NAME, ...}}, got {type(spec).__name__}",
                        file=file,
                        line=line_of((section, i), lines),
                        field=format_path((section, i)),
                    )
                )
                continue
            try:
                built[section].append(build_op(spec, stage, context))  # type: ignore[arg-type]
            except OpSpecError as exc:
                errors.append(_op_error(exc, (section, i), file, lines))
            except RepliscopeError as exc:
                errors.append(
                    ManifestError(
                        str(exc), file=file, line=line_of((section, i), lines), field=format_path((section, i))
                    )
                )
    return built["preprocess"], built["postprocess"]  # type: ignore[return-value]


def _op_error(exc: OpSpecError, at: Path_, file: str, lines: dict[Path_, int]) -> ManifestError:
    sub: Path_ = tuple(int(k) if k.isdigit() else k for k in exc.key.split(".") if k)
    return ManifestError(
        exc.message, file=file, line=line_of((*at, *sub), lines), field=format_path((*at, *sub)), allowed=exc.allowed
    )


def _check_consistency(loaded: LoadedManifest, pre: list[str], post: list[PostOp]) -> list[ManifestError]:
    """Fields that must agree with each other: the input layout and the last layout op, post ops of the
    manifest's task only, then the task's own checks (:meth:`repliscope.tasks.base.Task.check_postprocess`)."""
    from repliscope.tasks.base import get_task

    m = loaded.manifest
    spec = m.inputs[0]
    errors: list[ManifestError] = []
    layouts = [i for i, name in enumerate(pre) if name in ("data_layout", "reshape_layout")]
    if layouts:
        last = m.preprocess[layouts[-1]]
        if last.get("layout") != spec.layout:
            errors.append(
                loaded.error(
                    f"the last layout op produces {last.get('layout')}, but inputs[0].layout is {spec.layout}",
                    ("preprocess", layouts[-1], "layout"),
                    [spec.layout],
                )
            )
    task = get_task(m.task)
    allowed = task.post_ops
    foreign = [(i, op.name) for i, op in enumerate(post) if op.name not in allowed]
    errors.extend(
        loaded.error(f"'{name}' is not a post-processing op of {m.task}", ("postprocess", i, "op"), list(allowed))
        for i, name in foreign
    )
    if foreign:
        return errors
    return errors + [loaded.error(msg, at, allowed) for msg, at, allowed in task.check_postprocess(m, post)]


_ITEMSIZE = {"float32": 4, "float16": 2, "uint8": 1, "int8": 1, "int64": 8}


def _check_tensor_sizes(loaded: LoadedManifest) -> list[ManifestError]:
    """Every input/output ``shape``: axes are positive or -1, and one sample (-1 axes counted as 1) fits the
    :data:`repliscope.limits.TENSOR_BYTES` budget (the run checks it again times the batch size)."""
    budget = TENSOR_BYTES.value
    errors: list[ManifestError] = []
    m = loaded.manifest
    for section, specs in (("inputs", m.inputs), ("outputs", m.outputs)):
        for i, spec in enumerate(specs):
            at = (section, i, "shape")
            bad = [d for d in spec.shape if d == 0 or d < -1]
            if bad:
                errors.append(loaded.error(f"axis size {bad[0]}: an axis is a positive size or -1 (any)", at))
                continue
            elements = math.prod(d for d in spec.shape if d > 0)
            size = elements * _ITEMSIZE.get(spec.dtype, 8)
            if size > budget:
                errors.append(
                    loaded.error(
                        f"one sample of {spec.name} ({spec.dtype} {spec.shape}) is {size:,} "
                        f"bytes, more than the {budget:,}-byte tensor budget "
                        f"({TENSOR_BYTES.name}, ${TENSOR_BYTES.env})",
                        at,
                    )
                )
    return errors


def _check_pixels(loaded: LoadedManifest, pre: list[PreOp]) -> list[ManifestError]:
    """The image every pre-processing op makes stays within :data:`repliscope.limits.MAX_PIXELS`, as far as the
    manifest fixes it (a fixed output size, or a fixed shorter side: at least side x side); ``decode.max_pixels``
    may lower the limit, not raise it."""
    limit = MAX_PIXELS.value
    shape = StaticShape("encoded")
    for i, op in enumerate(pre):
        asked = getattr(op.params, "max_pixels", None) if "max_pixels" in op.params.model_fields_set else None
        if isinstance(asked, int) and asked > limit:
            return [
                loaded.error(
                    f"{asked:,} is above the {limit:,}-pixel limit ({MAX_PIXELS.name}, ${MAX_PIXELS.env})",
                    ("preprocess", i, "max_pixels"),
                )
            ]
        try:
            shape = op.static_shape(shape)
        except OpSpecError:
            return []  # _check_shapes reports it
        if shape.height is not None and shape.width is not None:
            pixels, what = shape.height * shape.width, f"a {shape.width}x{shape.height} image"
        elif shape.min_side is not None:
            pixels, what = shape.min_side**2, f"an image with a shorter side of {shape.min_side}"
        else:
            continue
        if pixels > limit:
            at = ("preprocess", i, "size") if hasattr(op.params, "size") else ("preprocess", i)
            return [
                loaded.error(
                    f"'{op.name}' makes {what} (at least {pixels:,} pixels), more than the {limit:,}"
                    f"-pixel limit ({MAX_PIXELS.name}, ${MAX_PIXELS.env})",
                    at,
                )
            ]
    return []


def _check_shapes(loaded: LoadedManifest, pre: list[PreOp]) -> list[ManifestError]:
    """Infer the pre-processing's output shape from the ops alone and compare it with ``inputs[0].shape``."""
    shape = StaticShape("encoded")
    sized_by: int | None = None
    for i, op in enumerate(pre):
        try:
            new = op.static_shape(shape)
        except OpSpecError as exc:
            return [_op_error(exc, ("preprocess", i), str(loaded.path), loaded.lines)]
        if (new.height, new.width) != (shape.height, shape.width):
            sized_by = i
        shape = new
    if shape.layout == "encoded":
        return [loaded.error("the pre-processing never decodes the file: put a 'decode' op first", ("preprocess", 0))]
    spec = loaded.manifest.inputs[0]
    layout_ops = any(op.name in ("data_layout", "reshape_layout") for op in pre)
    if layout_ops and {"NCHW": "CHW", "NHWC": "HWC"}.get(spec.layout) != shape.layout:
        return []  # the layout check names the layout op
    want = spec.shape
    got = shape.dims()
    shown = "x".join("?" if d is None else str(d) for d in got)
    by = f" (size set by preprocess[{sized_by}] {pre[sized_by].name})" if sized_by is not None else ""
    if len(want) != len(got) + 1:
        return [
            loaded.error(
                f"the pre-processing produces one {len(got)}-D sample ({shape.layout} {shown}), so "
                f"inputs[0].shape needs {len(got) + 1} axes (batch first), got {want}",
                ("inputs", 0, "shape"),
            )
        ]
    for axis, (w, g) in enumerate(zip(want[1:], got, strict=True)):
        if w == -1:
            continue
        if g is None:
            return [
                loaded.error(
                    f"axis {axis + 1} of the input is fixed at {w}, but the pre-processing output "
                    f"({shape.layout} {shown}) depends on the image: add a center_crop or a "
                    "fixed-size resize",
                    ("inputs", 0, "shape"),
                )
            ]
        if g != w:
            return [
                loaded.error(
                    f"the pre-processing produces samples of {shape.layout} {shown}{by}, but inputs[0].shape is {want}",
                    ("inputs", 0, "shape"),
                )
            ]
    return []


def _claim_warnings(loaded: LoadedManifest) -> list[str]:
    """A percentage claim of at most 1 was probably written as a fraction (0.751 for 75.1 %)."""
    from repliscope.manifest.schema import claim_metric_spec

    out = []
    for i, claim in enumerate(loaded.manifest.claims):
        spec = claim_metric_spec(claim.metric)
        if spec is not None and spec.unit == "percent" and 0 < claim.value <= 1:
            out.append(
                str(
                    loaded.error(
                        f"{claim.metric} {claim.value} is in percent, i.e. {claim.value:g} %: "
                        f"did you mean {claim.value * 100:g} %?",
                        ("claims", i, "value"),
                    )
                )
            )
    return out


def build_ops(loaded: LoadedManifest, context: BuildContext) -> tuple[list[PreOp], list[PostOp]]:
    """Build the manifest's ordered pre- and post-processing ops (registry lookup + parameter checks)."""
    from repliscope.ops.pipeline import build_op

    built: dict[str, list[Any]] = {"preprocess": [], "postprocess": []}
    for section, stage in (("preprocess", "pre"), ("postprocess", "post")):
        for i, spec in enumerate(getattr(loaded.manifest, section)):
            try:
                built[section].append(build_op(spec, stage, context))  # type: ignore[arg-type]
            except OpSpecError as exc:
                raise _op_error(exc, (section, i), str(loaded.path), loaded.lines) from None
            except RepliscopeError as exc:
                raise loaded.error(str(exc), (section, i)) from None
    return built["preprocess"], built["postprocess"]


def _schema_errors(exc: ValidationError, file: str, lines: dict[Path_, int]) -> list[ManifestError]:
    """Every pydantic error as a ManifestError, one per field. A missing key next to an unknown one in the same
    mapping is a typo: only the unknown key is reported, naming the missing one."""
    errors = exc.errors()
    unknown_parents = {tuple(e["loc"][:-1]) for e in errors if e["type"] == "extra_forbidden"}
    missing_of: dict[Path_, list[str]] = {}
    for e in errors:
        if e["type"] == "missing" and tuple(e["loc"][:-1]) in unknown_parents:
            missing_of.setdefault(tuple(e["loc"][:-1]), []).append(str(e["loc"][-1]))
    out: list[ManifestError] = []
    seen: set[Path_] = set()
    for err in errors:
        loc: Path_ = tuple(err["loc"])
        if loc in seen or (err["type"] == "missing" and loc[:-1] in unknown_parents):
            continue
        seen.add(loc)
        out.append(_schema_error(err, loc, file, lines, missing_of.get(loc[:-1], [])))
    return out


def _schema_error(err: Any, loc: Path_, file: str, lines: dict[Path_, int], missing: list[str]) -> ManifestError:
    allowed: list[str] | None = None
    if err["type"] == "extra_forbidden":
        allowed = _field_names(Manifest, loc[:-1])
        hint = f" (required {', '.join(repr(m) for m in missing)} is missing: a typo?)" if missing else ""
        message = f"unknown key '{loc[-1]}'{hint}"
    elif err["type"] == "missing":
        message = "required field is missing"
    elif err["type"] == "literal_error":
        expected = str(err.get("ctx", {}).get("expected", ""))
        allowed = [a.strip().strip("'") for a in expected.replace(" or ", ",").split(",") if a.strip()]
        message = f"{err['input']!r} is not allowed"
    elif err["type"] == "string_type":
        message = f"expected a string, got {type(err['input']).__name__} {err['input']!r} (quote it in YAML)"
    else:
        message = err["msg"].removeprefix("Value error, ")
    return ManifestError(message, file=file, line=line_of(loc, lines), field=format_path(loc), allowed=allowed)


def _field_names(model: type[BaseModel], loc: Path_) -> list[str] | None:
    """Field names of the (nested) pydantic model at ``loc``, for 'allowed' in unknown-key errors."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)) or part not in current.model_fields:
            return None
        current = _model_in(current.model_fields[part].annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return None


def _model_in(annotation: Any) -> Any:
    """The pydantic model inside ``X``, ``X | None``, ``list[X]`` or ``Annotated[list[X], ...]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None

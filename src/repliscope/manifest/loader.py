"""Load a manifest file: YAML -> schema -> built pipeline, with every error pointing at file:line."""

from __future__ import annotations

import hashlib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from repliscope.errors import ManifestError, OpSpecError, RepliscopeError
from repliscope.manifest.schema import Manifest
from repliscope.manifest.yaml_lines import Path_, format_path, line_of, load_with_lines
from repliscope.ops.base import BuildContext, PostOp, PreOp


@dataclass
class LoadedManifest:
    """A validated manifest with its provenance (path, text, sha256) and the line of every field."""

    manifest: Manifest
    path: Path
    text: str
    sha256: str
    lines: dict[Path_, int] = field(repr=False)

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def error(self, message: str, field_path: Path_, allowed: list[str] | None = None) -> ManifestError:
        return ManifestError(message, file=str(self.path), line=line_of(field_path, self.lines),
                             field=format_path(field_path), allowed=allowed)


def load_manifest(path: str | Path) -> LoadedManifest:
    """Read and validate ``path``. Raises ManifestError naming file, line, field and allowed values."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ManifestError(f"cannot read manifest: {exc.strerror}", file=str(p)) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"not UTF-8 text (byte {exc.start}: {raw[exc.start:exc.start + 1]!r})",
                            file=str(p)) from None
    data, lines = load_with_lines(text, str(p))
    if not isinstance(data, dict):
        raise ManifestError("the manifest must be a mapping of fields", file=str(p), line=1,
                            allowed=list(Manifest.model_fields))
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc, str(p), lines) from None
    loaded = LoadedManifest(manifest, p, text, hashlib.sha256(raw).hexdigest(), lines)
    # op entries are validated against the op registry right away: a typo never waits until run time
    pre, post = build_ops(loaded, BuildContext(class_names=tuple(f"class_{i}" for i in range(
        manifest.labels.num_classes))))
    _check_consistency(loaded, [op.name for op in pre], [op.name for op in post])
    return loaded


def _check_consistency(loaded: LoadedManifest, pre: list[str], post: list[str]) -> None:
    """Fields that must agree with each other: the input layout and the last layout op, the output kind and
    softmax, the class count, and a ``topk`` so predictions can be recorded."""
    m = loaded.manifest
    spec, out = m.inputs[0], m.outputs[0]
    layouts = [i for i, name in enumerate(pre) if name in ("data_layout", "reshape_layout")]
    if layouts:
        last = m.preprocess[layouts[-1]]
        if last.get("layout") != spec.layout:
            raise loaded.error(f"the last layout op produces {last.get('layout')}, but inputs[0].layout is "
                               f"{spec.layout}", ("preprocess", layouts[-1], "layout"), [spec.layout])
    if "topk" not in post:
        raise loaded.error("postprocess needs a 'topk' op so per-sample predictions can be recorded",
                           ("postprocess",))
    if out.kind == "logits" and "softmax" not in post:
        raise loaded.error("outputs[0].kind is 'logits': postprocess needs a 'softmax' op before 'topk' so the "
                           "recorded scores are probabilities", ("postprocess",))
    if out.kind == "probabilities" and "softmax" in post:
        raise loaded.error("outputs[0].kind is 'probabilities': a 'softmax' would be applied twice",
                           ("postprocess", post.index("softmax")))
    if out.shape and out.shape[-1] not in (-1, m.labels.num_classes):
        raise loaded.error(f"outputs[0].shape ends in {out.shape[-1]} classes, labels.num_classes is "
                           f"{m.labels.num_classes}", ("outputs", 0, "shape"))


def build_ops(loaded: LoadedManifest, context: BuildContext) -> tuple[list[PreOp], list[PostOp]]:
    """Build the manifest's ordered pre- and post-processing ops (registry lookup + parameter checks)."""
    from repliscope.ops.pipeline import build_op

    built: dict[str, list[Any]] = {"preprocess": [], "postprocess": []}
    for section, stage in (("preprocess", "pre"), ("postprocess", "post")):
        for i, spec in enumerate(getattr(loaded.manifest, section)):
            try:
                built[section].append(build_op(spec, stage, context))  # type: ignore[arg-type]
            except OpSpecError as exc:
                sub: Path_ = tuple(int(k) if k.isdigit() else k for k in exc.key.split(".") if k)
                raise loaded.error(exc.message, (section, i, *sub), exc.allowed) from None
            except RepliscopeError as exc:
                raise loaded.error(str(exc), (section, i)) from None
    return built["preprocess"], built["postprocess"]


def _first_error(exc: ValidationError, file: str, lines: dict[Path_, int]) -> ManifestError:
    # an unknown key explains a "missing" one next to it (a typo): report the unknown key first
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    err = errors[0]
    loc: Path_ = tuple(err["loc"])
    allowed: list[str] | None = None
    if err["type"] == "extra_forbidden":
        allowed = _field_names(Manifest, loc[:-1])
        message = f"unknown key '{loc[-1]}'"
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
    # for union errors pydantic appends the tried type to loc; drop non-field parts for the line lookup
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

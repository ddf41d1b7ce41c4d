"""Build ops from manifest entries and run them in the manifest's order.

``build_op`` turns one ``preprocess``/``postprocess`` entry (``{"op": name, **params}``) into an op,
turning every problem into an :class:`OpSpecError` naming the key and the allowed values. An op that needs
more than its parameters (e.g. ``labels``) defines a ``from_context(params, context)`` classmethod.
A :class:`Pipeline` is immutable; ``replace_pre`` & co. derive one-change variants (pitfall sweeps).
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

import numpy as np
from pydantic import ValidationError

from repliscope.errors import OpSpecError, RepliscopeError
from repliscope.ops.base import OPS, BuildContext, Geometry, Item, Op, OpParams, PostOp, Predictions, PreOp, Stage
from repliscope.tracing.levels import RANK
from repliscope.tracing.tracer import Tracer, current_tracer

MODEL_RANK = RANK["model"]


def op_names(stage: Stage) -> list[str]:
    """Registered op names of one stage, sorted."""
    return [name for name in OPS.names() if OPS.get(name).stage == stage]


def build_op(spec: Mapping[str, Any], stage: Stage, context: BuildContext) -> Op:
    """One op from a manifest entry; raises :class:`OpSpecError` (key = "op" or the parameter)."""
    allowed = op_names(stage)
    if "op" not in spec:
        raise OpSpecError("op", "missing op name", allowed=allowed)
    name = spec["op"]
    if not isinstance(name, str) or name not in OPS:
        close = difflib.get_close_matches(str(name), allowed, n=3)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise OpSpecError("op", f"unknown {stage}-processing op {name!r}{hint}", allowed=allowed)
    cls = OPS.get(name)
    if cls.stage != stage:
        raise OpSpecError(
            "op", f"{name!r} is a {cls.stage}-processing op, not allowed in {stage}process", allowed=allowed
        )
    raw = {k: v for k, v in spec.items() if k != "op"}
    params = _validate_params(cls.Params, raw)
    from_context = getattr(cls, "from_context", None)
    op: Op = from_context(params, context) if from_context is not None else cls(params)
    return op


def _validate_params(model: type[OpParams], raw: Mapping[str, Any]) -> OpParams:
    fields = model.model_fields
    for key in raw:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise OpSpecError(str(key), f"unknown parameter{hint}", allowed=list(fields))
    for key, info in fields.items():
        if info.is_required() and key not in raw:
            choices = _literal_choices(info.annotation)  # a word parameter lists its words
            raise OpSpecError(key, "required parameter missing", allowed=choices or None)
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        raise _to_spec_error(model, raw, exc) from None


def _to_spec_error(model: type[OpParams], raw: Mapping[str, Any], exc: ValidationError) -> OpSpecError:
    """The first failing field's error. For a union (``float | list[float]``) the member whose type
    matched the value wins (its tag is dropped from the key); when no member's type matches, the message
    states the expected types."""
    errors = exc.errors()
    field = str(errors[0]["loc"][0]) if errors[0]["loc"] else "op"
    mine = [e for e in errors if e["loc"] and str(e["loc"][0]) == field] or errors[:1]

    def rank(e: Any) -> tuple[bool, int]:
        return not str(e["type"]).endswith("_type"), sum(isinstance(p, int) for p in e["loc"])

    err = max(mine, key=rank)
    key = ".".join([field, *(str(p) for p in err["loc"][1:] if isinstance(p, int))])
    info = model.model_fields.get(field)
    annotation = info.annotation if info is not None else None
    if err["type"] == "literal_error":
        return OpSpecError(key, f"invalid value {err['input']!r}", allowed=_literal_choices(annotation))
    if len(mine) > 1 and rank(err) == (False, 0):
        value = raw.get(field)
        return OpSpecError(key, f"expected {_type_name(annotation)}, got {type(value).__name__} {value!r}")
    return OpSpecError(
        key, f"{err['msg'][0].lower()}{err['msg'][1:]}, got {type(err['input']).__name__} {err['input']!r}"
    )


def _literal_choices(annotation: Any) -> list[str]:
    if get_origin(annotation) is Literal:
        return [str(a) for a in get_args(annotation)]
    return [c for arg in get_args(annotation) for c in _literal_choices(arg)]


def _type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(annotation) if a is not type(None))
    if hasattr(annotation, "__metadata__"):  # Annotated[...]
        return _type_name(get_args(annotation)[0])
    if origin is list:
        return f"a list of {_type_name(get_args(annotation)[0])}"
    return getattr(annotation, "__name__", str(annotation))


def decode_input(data: bytes | bytearray | memoryview) -> Item:
    """The Item ``decode`` expects: the file bytes as a read-only 1-D uint8 array, layout ``encoded``."""
    return Item(np.frombuffer(bytes(data), dtype=np.uint8), layout="encoded")


@dataclass(frozen=True)
class Pipeline:
    """Ordered pre-processing ops (per sample), batching, and ordered post-processing ops (per batch)."""

    pre_ops: tuple[PreOp, ...]
    post_ops: tuple[PostOp, ...]

    def __init__(self, pre_ops: Iterable[PreOp], post_ops: Iterable[PostOp]) -> None:
        object.__setattr__(self, "pre_ops", tuple(pre_ops))
        object.__setattr__(self, "post_ops", tuple(post_ops))

    @classmethod
    def from_specs(
        cls,
        pre_specs: Sequence[Mapping[str, Any]],
        post_specs: Sequence[Mapping[str, Any]],
        context: BuildContext | None = None,
    ) -> Pipeline:
        """Build every op; an error's key is prefixed with the entry, e.g. ``preprocess[2].size``."""
        ctx = context or BuildContext()
        pre: list[PreOp] = []
        post: list[PostOp] = []
        for section, specs, stage, out in (
            ("preprocess", pre_specs, "pre", pre),
            ("postprocess", post_specs, "post", post),
        ):
            for i, spec in enumerate(specs):
                try:
                    op = build_op(spec, stage, ctx)  # type: ignore[arg-type]
                except OpSpecError as exc:
                    raise OpSpecError(f"{section}[{i}].{exc.key}", exc.message, exc.allowed) from exc
                out.append(op)  # type: ignore[arg-type]
        return cls(pre, post)

    def preprocess(self, item: Item, tracer: Tracer | None = None) -> Item:
        """Apply the pre-processing ops in order to one sample; at trace level ``model`` or deeper each op is a
        ``preprocess/<op name>`` span of ``tracer`` (default: the current tracer)."""
        t = current_tracer() if tracer is None else tracer
        if t.rank < MODEL_RANK:
            for op in self.pre_ops:
                item = op(item)
            return item
        for op in self.pre_ops:
            with t.span(f"preprocess/{op.name}", "model"):
                item = op(item)
        return item

    def batch(self, items: Sequence[Item]) -> np.ndarray:
        """Stack pre-processed samples along a new axis 0: (N, C, H, W) or (N, H, W, C), contiguous."""
        if not items:
            raise RepliscopeError("cannot batch zero samples")
        first = items[0]
        for it in items:
            if it.layout == "encoded":
                raise RepliscopeError("cannot batch encoded samples: the pipeline has no 'decode'")
            same = it.layout == first.layout and it.data.dtype == first.data.dtype
            if not same or it.data.shape != first.data.shape:
                raise RepliscopeError(
                    f"cannot batch samples of {first.layout} {first.data.dtype}{list(first.data.shape)} and "
                    f"{it.layout} {it.data.dtype}{list(it.data.shape)}: end pre-processing with a fixed size "
                    "(e.g. center_crop)"
                )
        return np.ascontiguousarray(np.stack([it.data for it in items], axis=0))

    def postprocess(
        self,
        outputs: np.ndarray | Mapping[str, np.ndarray],
        tracer: Tracer | None = None,
        *,
        geometry: Sequence[Geometry | None] | None = None,
    ) -> Predictions:
        """Apply the post-processing ops in order to a batch of model outputs: a (N, C) score array
        (classification; converted to float32), or every output by manifest name (``Predictions.outputs``, batch
        axis first, dtypes kept; ``scores`` is then the first output as float32). ``geometry``: per row, the
        sample's :class:`Geometry` (``Predictions.geometry``; detection ops map boxes back with it). At trace
        level ``model`` or deeper each op is a ``postprocess/<op name>`` span of ``tracer`` (default: current)."""
        rows = list(geometry) if geometry is not None else []
        if isinstance(outputs, Mapping):
            if not outputs:
                raise RepliscopeError("the model returned no outputs")
            named = {name: np.asarray(value) for name, value in outputs.items()}
            first = next(iter(named.values()))
            preds = Predictions(scores=np.asarray(first, dtype=np.float32), outputs=named, geometry=rows)
        else:
            preds = Predictions(scores=np.asarray(outputs, dtype=np.float32), geometry=rows)
        t = current_tracer() if tracer is None else tracer
        if t.rank < MODEL_RANK:
            for op in self.post_ops:
                preds = op(preds)
            return preds
        for op in self.post_ops:
            with t.span(f"postprocess/{op.name}", "model"):
                preds = op(preds)
        return preds

    def describe(self) -> dict[str, list[dict[str, Any]]]:
        """The resolved pipeline as stored in evaluation records."""
        return {
            "preprocess": [op.describe() for op in self.pre_ops],
            "postprocess": [op.describe() for op in self.post_ops],
        }

    def index_of(self, name: str) -> int:
        """Index of the first pre-processing op called ``name``."""
        for i, op in enumerate(self.pre_ops):
            if op.name == name:
                return i
        raise KeyError(f"no pre-processing op {name!r} in {[op.name for op in self.pre_ops]}")

    def replace_pre(self, index: int, op: PreOp) -> Pipeline:
        """A copy with pre op ``index`` replaced by ``op``."""
        ops = list(self.pre_ops)
        ops[index] = op
        return Pipeline(ops, self.post_ops)

    def insert_pre(self, index: int, op: PreOp) -> Pipeline:
        """A copy with ``op`` inserted before pre op ``index`` (``len(pre_ops)`` appends)."""
        ops = list(self.pre_ops)
        ops.insert(index, op)
        return Pipeline(ops, self.post_ops)

    def remove_pre(self, index: int) -> Pipeline:
        """A copy without pre op ``index``."""
        ops = list(self.pre_ops)
        del ops[index]
        return Pipeline(ops, self.post_ops)

    def replace_post(self, index: int, op: PostOp) -> Pipeline:
        """A copy with post op ``index`` replaced by ``op``."""
        ops = list(self.post_ops)
        ops[index] = op
        return Pipeline(self.pre_ops, ops)

    def __repr__(self) -> str:
        def block(ops: Sequence[Op]) -> str:
            return "".join(f"\n    {op!r}," for op in ops) + ("\n  " if ops else "")

        return f"Pipeline(\n  preprocess=[{block(self.pre_ops)}],\n  postprocess=[{block(self.post_ops)}],\n)"

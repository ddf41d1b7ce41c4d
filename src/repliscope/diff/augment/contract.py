"""The augmentation diff's contract: a training augmentation as ORDERED ops whose random parameters are explicit.

An augmentation pipeline (:data:`AUGMENTATIONS`, keyed by the name the CLI takes) names its ops in order, draws
every random parameter once per (image, seed) (:meth:`AugmentPipeline.draw`) and runs the ORIGINAL's own code for
each op (Darknet: libdarknet's ``place_image`` / ``distort_image`` / ``flip_image`` / ``correct_boxes``). A
candidate implements the same ops; it is a Python module or object (``FILE.py:NAME`` or ``module:NAME``) with one
callable per op name, each taking keyword parameters as the pipeline draws them:

- image ops ``fn(image, **params) -> image``: float32 ``(H, W, 3)`` RGB in [0, 1];
- box ops ``fn(boxes, **params) -> boxes``: float32 ``(K, 5)`` rows ``(cx, cy, w, h, class)`` normalised;

and, to be compared when it draws its own randomness (``--draws own``), ``augment(image, boxes, seed) ->
{op name: image or boxes}``: the output of every op, in order, for its own draws from ``seed``.
:mod:`repliscope.diff.augment.darknet_numpy` is a complete example (repliscope's port of Darknet's ops).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from repliscope.errors import RepliscopeError
from repliscope.registry import Registry

OpKind = Literal["image", "boxes"]


@dataclass(frozen=True)
class AugmentOp:
    """One op: its ``name`` (the candidate's attribute), ``kind``, the draw fields it takes (``params``), the
    original function it pins (``origin``) and its tolerance note (``tolerance``: absolute, float32 values)."""

    name: str
    kind: OpKind
    params: tuple[str, ...]
    origin: str
    doc: str


@dataclass(frozen=True)
class Drawn:
    """One (image, seed) of a pipeline: the decoded image, its label rows and the parameters of every op."""

    sample: str
    seed: int
    image: np.ndarray
    boxes: np.ndarray
    params: Mapping[str, Mapping[str, Any]]


class AugmentPipeline:
    """A registered training augmentation: ops in order, the draws and the original's implementation.

    An original that runs in a provisioned stack names its task (``stack_task``, a name of
    ``repliscope.stacks.call.TASKS``); the caller binds the runner (:meth:`bind`) and :meth:`prepare` computes every
    (image, seed) there at once; :meth:`reference_output` then reads the original's output of an op."""

    name: str
    ops: tuple[AugmentOp, ...]
    origin: str
    pin: str = ""
    """How the original's side is pinned (a note in every result)."""
    stack_task: str | None = None

    def bind(self, run: Callable[[str, Path, Path], None]) -> None:
        """The runner of :attr:`stack_task` (``run(task, IN, OUT)``); nothing for an in-process original."""

    def prepare(self, items: Sequence[Any], seeds: Sequence[int]) -> None:
        """Anything to compute for every (item, seed) before the diff (an original in a stack: all of it)."""

    def close(self) -> None:
        """Release what :meth:`prepare` kept."""

    def reference_output(self, drawn: Drawn, op: AugmentOp, inp: np.ndarray) -> np.ndarray:
        """The original's output of ``op`` on ``inp`` (the original's own input of that op) with the draws."""
        return self.original(op.name)(inp, **drawn.params[op.name])

    @classmethod
    def from_model_config(cls, config_path: Path) -> AugmentPipeline:
        """The pipeline with the augmentation settings of the model's training config (a Darknet cfg)."""
        raise NotImplementedError

    def decode(self, data: bytes, suffix: str) -> np.ndarray:
        """The image as the original's training loader decodes it: float32 (H, W, 3) RGB in [0, 1]."""
        raise NotImplementedError

    def draw(self, image: np.ndarray, boxes: np.ndarray, seed: int, sample: str) -> Drawn:
        raise NotImplementedError

    def original(self, op: str) -> Callable[..., np.ndarray]:
        raise NotImplementedError

    def original_sample(self, image: np.ndarray, boxes: np.ndarray, seed: int, sample: str) -> dict[str, np.ndarray]:
        """Every op's output for the original's own draws from ``seed`` (the distribution comparison)."""
        drawn = self.draw(image, boxes, seed, sample)
        return run_chain(self, {op.name: self.original(op.name) for op in self.ops}, drawn)

    def tolerance(self, op: AugmentOp, image: np.ndarray) -> float:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"pipeline": self.name, "origin": self.origin}


AUGMENTATIONS: Registry[type[AugmentPipeline]] = Registry(
    "augmentation pipeline",
    providers=("repliscope.diff.augment.darknet_pipeline", "repliscope.diff.augment.tfmg_pipeline"),
)


def run_chain(
    pipeline: AugmentPipeline, fns: Mapping[str, Callable[..., np.ndarray]], drawn: Drawn
) -> dict[str, np.ndarray]:
    """Carried run: each image op on the previous image op's output, each box op on the previous boxes."""
    image, boxes = drawn.image, drawn.boxes
    out: dict[str, np.ndarray] = {}
    for op in pipeline.ops:
        if op.kind == "image":
            image = fns[op.name](image, **drawn.params[op.name])
            out[op.name] = image
        else:
            boxes = fns[op.name](boxes, **drawn.params[op.name])
            out[op.name] = boxes
    return out


@dataclass(frozen=True)
class AugmentCandidate:
    """A loaded candidate: its spec, the op callables it has and its ``augment`` (own draws), if any."""

    spec: str
    ops: Mapping[str, Callable[..., Any]]
    augment: Callable[..., Mapping[str, Any]] | None


def as_candidate(spec: str, obj: Any, pipeline: AugmentPipeline) -> AugmentCandidate:
    """A module, object or dict with a callable per op name (missing ops are an error naming them)."""

    def get(name: str) -> Any:
        return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)

    names = [op.name for op in pipeline.ops]
    found = {n: get(n) for n in names}
    missing = [n for n, fn in found.items() if not callable(fn)]
    augment = get("augment")
    if missing and not callable(augment):
        raise RepliscopeError(
            f"--augment {spec}: no callable for op(s) {', '.join(missing)} of pipeline '{pipeline.name}' "
            f"(ops in order: {', '.join(names)}; or an augment(image, boxes, seed) for --draws own)"
        )
    return AugmentCandidate(
        spec, {n: fn for n, fn in found.items() if callable(fn)}, augment if callable(augment) else None
    )


def checked_output(spec: str, op: AugmentOp, value: Any, like: np.ndarray) -> np.ndarray:
    """The candidate's output of ``op`` as float32, or a RepliscopeError in one line (wrong type, shape, NaN)."""
    try:
        arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise RepliscopeError(f"--augment {spec}: op '{op.name}' returned {type(value).__name__}: {exc}") from None
    if op.kind == "image" and arr.shape != like.shape:
        raise RepliscopeError(
            f"--augment {spec}: op '{op.name}' returned shape {arr.shape}, expected {like.shape} "
            "((H, W, 3) float32 RGB in [0, 1])"
        )
    if op.kind == "boxes" and (arr.ndim != 2 or arr.shape[1] != 5):
        raise RepliscopeError(
            f"--augment {spec}: op '{op.name}' returned shape {arr.shape}, expected (K, 5) rows (cx, cy, w, h, class)"
        )
    if not np.all(np.isfinite(arr)):
        raise RepliscopeError(f"--augment {spec}: op '{op.name}' returned NaN or Inf values")
    return arr

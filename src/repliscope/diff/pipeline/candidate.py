"""A user's own pre-processing, loaded for ``repliscope diff MANIFEST --pipeline FILE.py:NAME``.

``NAME`` in ``FILE.py`` (or in an importable ``module``) is one of:

* a function ``f(path) -> model input of one sample`` (numpy array, torch / TensorFlow tensor or PIL image;
  HWC or CHW; uint8 or float; with or without a batch axis of 1);
* a list of named stages ``[(name, callable), ...]``: the first takes the image path, each next one the previous
  output; every stage output is compared with the manifest op output that plays the same role;
* a torchvision / timm ``Compose``-like object (anything with a ``.transforms`` list of callables): run as stages
  after torchvision's default loader, ``PIL.Image.open(path).convert("RGB")``.

Outputs are turned into numpy (:func:`to_array`) and aligned with the manifest's input (:func:`align`): a batch
axis of 1 is dropped and an HWC <-> CHW transpose applied when that makes the shapes agree, each said in the
result. Importing this module imports no ML framework.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from repliscope.errors import RepliscopeError
from repliscope.manifest.code_refs import REF_PATTERN, CodeRefError, check_public

CandidateKind = Literal["function", "stages", "compose"]
LOADER_STAGE = "loader"
"""Name of the stage that opens the image for a Compose (torchvision's ``default_loader``)."""


@dataclass
class PipelineCandidate:
    """The loaded candidate: ``stages`` run in order on the image path (one stage for a function)."""

    spec: str
    kind: CandidateKind
    stages: list[tuple[str, Callable[[Any], Any]]] = field(default_factory=list)

    def describe(self) -> str:
        if self.kind == "function":
            return f"function {self.spec}"
        names = ", ".join(name for name, _ in self.stages)
        return f"{self.kind} {self.spec} ({len(self.stages)} stages: {names})"


def pil_loader(path: str) -> Any:
    """torchvision's ``default_loader``: ``PIL.Image.open(path).convert("RGB")``."""
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB")


def load_candidate(spec: str) -> PipelineCandidate:
    """Import ``FILE.py:NAME`` or ``module:NAME`` and classify what NAME is; a one-line RepliscopeError when the
    file does not import, has no NAME, or NAME is none of the accepted kinds (or private: ``_name``).

    ``--pipeline`` is the invoking user's own code on their own command line, never a manifest or service field."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name or not REF_PATTERN.match(f"x:{name}") or "." in name:
        raise RepliscopeError(f"--pipeline {spec!r}: expected FILE.py:NAME or module:NAME")
    try:  # the shared rule of repliscope.manifest.code_refs: public names only
        check_public([name], spec, "--pipeline", "--pipeline")
    except CodeRefError as exc:
        raise RepliscopeError(str(exc)) from None
    module = _import(where, spec)
    if not hasattr(module, name):
        names = sorted(
            n
            for n, v in vars(module).items()
            if not n.startswith("_") and callable(v) and getattr(v, "__module__", None) == module.__name__
        )
        listed = f" (callables defined there: {', '.join(names)})" if names else ""
        raise RepliscopeError(f"--pipeline {spec}: {where} has no '{name}'{listed}")
    return classify(spec, getattr(module, name))


def classify(spec: str, obj: Any) -> PipelineCandidate:
    """A function, a list of (name, callable) stages, or a Compose-like object -> :class:`PipelineCandidate`."""
    transforms = getattr(obj, "transforms", None)
    if transforms is not None and not isinstance(obj, (list, tuple)):
        items = list(transforms) if isinstance(transforms, Sequence) else None
        if not items or not all(callable(t) for t in items):
            raise RepliscopeError(
                f"--pipeline {spec}: a Compose-like object needs .transforms to be a non-empty list "
                f"of callables, got {type(transforms).__name__}"
            )
        stages: list[tuple[str, Callable[[Any], Any]]] = [(f"{LOADER_STAGE} (PIL open + convert RGB)", pil_loader)]
        stages += [(f"{i}:{type(t).__name__}", t) for i, t in enumerate(items, 1)]
        return PipelineCandidate(spec, "compose", stages)
    if isinstance(obj, (list, tuple)):
        out = []
        for i, entry in enumerate(obj):
            if not (
                isinstance(entry, (list, tuple))
                and len(entry) == 2
                and isinstance(entry[0], str)
                and callable(entry[1])
            ):
                raise RepliscopeError(
                    f"--pipeline {spec}: stage {i} is {entry!r}; a stage list holds (name, callable) pairs"
                )
            out.append((entry[0], entry[1]))
        if not out:
            raise RepliscopeError(f"--pipeline {spec}: the stage list is empty")
        if len({n for n, _ in out}) != len(out):
            raise RepliscopeError(f"--pipeline {spec}: stage names repeat ({', '.join(n for n, _ in out)})")
        return PipelineCandidate(spec, "stages", out)
    if callable(obj):
        return PipelineCandidate(spec, "function", [(getattr(obj, "__name__", spec.rpartition(":")[2]), obj)])
    raise RepliscopeError(
        f"--pipeline {spec}: '{spec.rpartition(':')[2]}' is a {type(obj).__name__}, not a "
        "function, a list of (name, callable) stages or a Compose-like object"
    )


def _import(where: str, spec: str) -> Any:
    """``where`` (a ``.py`` file or a module) imported as the user's own code: :mod:`repliscope.user_code`."""
    from repliscope.user_code import import_user_module

    return import_user_module(where, "--pipeline", spec)


def to_array(value: Any) -> tuple[np.ndarray, str]:
    """A numpy copy of one stage output and what it was: numpy, torch tensor, TensorFlow tensor or PIL image."""
    if isinstance(value, np.ndarray):
        return value, "numpy array"
    module = type(value).__module__ or ""
    if module.startswith("torch") and hasattr(value, "detach"):
        return np.asarray(value.detach().cpu().numpy()), "torch tensor"
    if module.startswith(("tensorflow", "tf_keras", "keras")) and hasattr(value, "numpy"):
        return np.asarray(value.numpy()), "TensorFlow tensor"
    if module.startswith("PIL"):
        return np.asarray(value), f"PIL image (mode {getattr(value, 'mode', '?')})"
    if hasattr(value, "__array__"):
        return np.asarray(value), type(value).__name__
    raise RepliscopeError(
        f"the candidate returned a {type(value).__name__}; expected a numpy array, a torch or "
        "TensorFlow tensor or a PIL image"
    )


@dataclass(frozen=True)
class Aligned:
    """A candidate output aligned with a reference array: the array, or why it cannot be (``error``)."""

    data: np.ndarray | None
    notes: tuple[str, ...] = ()
    error: str | None = None


def _fits(shape: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    return len(shape) == len(expected) and all(e < 0 or s == e for s, e in zip(shape, expected, strict=True))


def align(arr: np.ndarray, expected: tuple[int, ...], layout: str) -> Aligned:
    """``arr`` as an array of shape ``expected`` (one sample, -1 = any size): a leading batch axis of 1 dropped,
    HWC <-> CHW transposed when only that makes the shapes agree; else the mismatch with its likely cause."""
    notes: list[str] = []
    if arr.dtype.kind not in "biuf":
        return Aligned(
            None,
            (),
            f"dtype {arr.dtype} is not a number type (the model takes numbers: uint8 or float; "
            "a list of arrays or strings was returned?)",
        )
    if arr.ndim == len(expected) + 1 and arr.shape[0] == 1:
        arr = arr[0]
        notes.append("a batch axis of 1 was dropped")
    if _fits(arr.shape, expected):
        return Aligned(arr, tuple(notes))
    if arr.ndim == 3 and len(expected) == 3:
        hwc_to_chw, chw_to_hwc = arr.transpose(2, 0, 1), arr.transpose(1, 2, 0)
        if _fits(hwc_to_chw.shape, expected) and arr.shape[2] in (1, 3, 4):
            return Aligned(hwc_to_chw, (*notes, "HWC, compared after transposing to CHW"))
        if _fits(chw_to_hwc.shape, expected) and arr.shape[0] in (1, 3, 4):
            return Aligned(chw_to_hwc, (*notes, "CHW, compared after transposing to HWC"))
    return Aligned(
        None,
        tuple(notes),
        f"shape {tuple(arr.shape)} does not match {tuple(expected)} "
        f"({layout}): {shape_cause(tuple(arr.shape), expected, layout)}",
    )


def shape_cause(got: tuple[int, ...], expected: tuple[int, ...], layout: str) -> str:
    """The likely cause of an output of shape ``got`` where ``expected`` (one sample, ``layout``) is needed."""
    if len(got) == len(expected) + 1:
        return f"a batch of {got[0]} samples (the function must return one sample)"
    if len(got) == len(expected) - 1:
        return "one channel axis missing (a grayscale image, or the channels squeezed away)"
    if len(got) != len(expected):
        return f"{len(got)} axes where the model input has {len(expected)}"
    chw = layout in ("NCHW", "CHW")
    c_axis = 0 if chw else len(expected) - 1
    channels = {got[0], got[-1]} & {1, 4}
    if channels and not ({got[0], got[-1]} & {3}):
        n = channels.pop()
        return "alpha channel kept (RGBA, 4 channels)" if n == 4 else "a grayscale image (1 channel)"
    got_c = c_axis if got[c_axis] == expected[c_axis] else (0 if got[0] in (1, 3, 4) else len(got) - 1)
    spatial = [d for i, d in enumerate(got) if i != got_c]
    want = [d for i, d in enumerate(expected) if i != c_axis]
    if all(w > 0 for w in want) and len(spatial) == len(want):
        if all(g >= w for g, w in zip(spatial, want, strict=True)):
            return (
                f"spatial size {tuple(spatial)} is larger than {tuple(want)}: the crop (or the resize to the "
                "input size) is missing"
            )
        if all(g <= w for g, w in zip(spatial, want, strict=True)):
            return f"spatial size {tuple(spatial)} is smaller than {tuple(want)}: resized or cropped too small"
        return f"spatial size {tuple(spatial)} instead of {tuple(want)}: another resize / crop geometry"
    return "another layout or size"


def describe_array(arr: np.ndarray) -> str:
    """``(224, 224, 3) uint8``."""
    return f"{tuple(arr.shape)} {arr.dtype}"

"""Run one REGISTERED loss function in the provisioned stack its :class:`~repliscope.diff.loss.contract.LossSpec`
names, and read its :class:`~repliscope.diff.loss.contract.LossResult` back.

An original loss whose pins are not ours (``tfmg_yolo``: TensorFlow 2.20 and tf-keras; ``maskformer``: transformers
5 and torch 2.13) runs in its own stack (:mod:`repliscope.stacks.store`). :func:`run_loss` is the one entry point:

- ``spec.stack`` is None, or this process already runs in that stack: the loss is called here;
- otherwise the stack is created on demand (or reused from the cache), the inputs are written to a temporary
  ``.npz`` and ``<stack python> -m repliscope.stacks.call loss NAME IN.npz OUT.npz`` runs; the result comes back
  the same way.

Nothing a caller passes can name code: the child accepts only a name of the ``LOSSES`` registry and runs that
entry's target. The files hold arrays and one JSON document (stored as bytes), and are read with
``allow_pickle=False``. The child runs with a bounded time (``timeout``, default :data:`DEFAULT_TIMEOUT`); a
failure is one line (which loss, which stack, why) followed by the last lines of the child's stderr.

The dispatch lives here, above the core (:mod:`repliscope.diff` never imports stacks, checked by ``make lint``):
the loss diff asks :func:`run_loss` for each side whose spec names a stack.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.diff.loss.contract import LOSSES, ImageTargets, LossInputs, LossResult, LossSpec
from repliscope.diff.loss.originals.stack_io import read_npz, write_npz
from repliscope.stacks.current import current_stack
from repliscope.stacks.spec import StackError, parse_spec

DEFAULT_TIMEOUT = 900.0
"""Seconds a loss may run in its stack (interpreter start, framework import, graph building and the call)."""

STDERR_TAIL = 15
"""Lines of the child's stderr shown in a failure."""

FORMAT = "repliscope-loss-call/1"


class LossCallError(StackError):
    """A loss could not be run in its stack (the message names the loss, the stack and why)."""


# -- serialisation (no pickle) ------------------------------------------------------------------------------------


def _json_ready(value: Any, where: str) -> Any:
    """``value`` as plain JSON (mappings, sequences, str, int, float, bool, None); numpy scalars and arrays are
    converted. LossCallError naming ``where`` for anything else."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return _json_ready(value.tolist(), where)
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise LossCallError(f"{where}: key {key!r} is not a string; only JSON-like configs cross to a stack")
            out[key] = _json_ready(item, f"{where}.{key}")
        return out
    if isinstance(value, list | tuple):
        return [_json_ready(item, f"{where}[{i}]") for i, item in enumerate(value)]
    raise LossCallError(
        f"{where}: a {type(value).__name__} cannot cross to a stack (allowed: mappings, lists, str, int, float, "
        "bool, None, numpy arrays)"
    )


def _array(arrays: Mapping[str, np.ndarray], key: str, dtype: type, ndim: int | None, what: str) -> np.ndarray:
    """``arrays[key]``, checked to be of ``dtype`` and (unless None) rank ``ndim``."""
    if key not in arrays:
        raise LossCallError(f"{what}: the array '{key}' is missing")
    value = arrays[key]
    if value.dtype != np.dtype(dtype) or (ndim is not None and value.ndim != ndim):
        rank = "any rank" if ndim is None else f"{ndim} dimensions"
        raise LossCallError(
            f"{what}: '{key}' is {value.dtype} with {value.ndim} dimensions; expected {np.dtype(dtype)} with {rank}"
        )
    return value


def save_inputs(inputs: LossInputs, path: Path) -> None:
    """Write ``inputs`` to ``path`` (.npz: the arrays, plus family, names, image ids and the config as JSON)."""
    arrays: dict[str, np.ndarray] = {}
    names = list(inputs.outputs)
    for i, name in enumerate(names):
        arrays[f"output_{i}"] = np.ascontiguousarray(inputs.outputs[name], dtype=np.float32)
    targets = []
    for i, target in enumerate(inputs.targets):
        arrays[f"boxes_{i}"] = np.ascontiguousarray(target.boxes, dtype=np.float32).reshape(-1, 4)
        arrays[f"classes_{i}"] = np.ascontiguousarray(target.classes, dtype=np.int64).reshape(-1)
        if target.masks is not None:
            arrays[f"masks_{i}"] = np.ascontiguousarray(target.masks, dtype=bool)
        targets.append({"image_id": target.image_id, "masks": target.masks is not None})
    meta = {
        "format": FORMAT,
        "family": inputs.family,
        "outputs": names,
        "targets": targets,
        "config": _json_ready(dict(inputs.config), "config"),
    }
    write_npz(path, meta, arrays)


def load_inputs(path: Path) -> LossInputs:
    """The LossInputs :func:`save_inputs` wrote (every array's dtype and rank checked)."""
    what = "loss inputs"
    meta, arrays = read_npz(path, FORMAT, what=what, error=LossCallError)
    outputs = {
        str(name): _array(arrays, f"output_{i}", np.float32, None, what) for i, name in enumerate(meta["outputs"])
    }
    targets = []
    for i, item in enumerate(meta["targets"]):
        masks = _array(arrays, f"masks_{i}", np.bool_, 3, what) if item["masks"] else None
        targets.append(
            ImageTargets(
                image_id=str(item["image_id"]),
                boxes=_array(arrays, f"boxes_{i}", np.float32, 2, what),
                classes=_array(arrays, f"classes_{i}", np.int64, 1, what),
                masks=masks,
            )
        )
    return LossInputs(family=str(meta["family"]), outputs=outputs, targets=tuple(targets), config=meta["config"])


def save_result(result: LossResult, path: Path) -> None:
    """Write ``result`` to ``path`` (.npz: the gradients, the rest as JSON)."""
    names = list(result.gradients)
    arrays = {f"gradient_{i}": np.ascontiguousarray(result.gradients[n], dtype=np.float32) for i, n in enumerate(names)}
    meta = {
        "format": FORMAT,
        "total": float(result.total),
        "components": {k: float(v) for k, v in result.components.items()},
        "gradients": names,
        "matching": None
        if result.matching is None
        else [[[int(p), int(t), float(c)] for p, t, c in image] for image in result.matching],
        "per_image": None if result.per_image is None else [float(v) for v in result.per_image],
        "notes": [str(n) for n in result.notes],
    }
    write_npz(path, meta, arrays)


def load_result(path: Path) -> LossResult:
    """The LossResult :func:`save_result` wrote."""
    what = "loss result"
    meta, arrays = read_npz(path, FORMAT, what=what, error=LossCallError)
    gradients = {}
    for i, name in enumerate(meta["gradients"]):
        key = f"gradient_{i}"
        if key not in arrays or arrays[key].dtype != np.float32:
            raise LossCallError(f"{what}: the float32 gradient of '{name}' is missing")
        gradients[str(name)] = arrays[key]
    matching = meta["matching"]
    return LossResult(
        total=float(meta["total"]),
        components={str(k): float(v) for k, v in meta["components"].items()},
        gradients=gradients,
        matching=None
        if matching is None
        else tuple(tuple((int(p), int(t), float(c)) for p, t, c in image) for image in matching),
        per_image=None if meta["per_image"] is None else tuple(float(v) for v in meta["per_image"]),
        notes=tuple(str(n) for n in meta["notes"]),
    )


# -- running ------------------------------------------------------------------------------------------------------


def _spec(name_or_spec: str | LossSpec) -> LossSpec:
    return LOSSES.get(name_or_spec) if isinstance(name_or_spec, str) else name_or_spec


def in_stack(spec: LossSpec) -> bool:
    """Whether ``spec`` runs in this process: it names no stack, or this process runs in that stack."""
    if spec.stack is None:
        return True
    return bool(current_stack()["spec"] == parse_spec(spec.stack).text)


def _call_target(spec: LossSpec, inputs: LossInputs) -> LossResult:
    """Import ``spec.target`` (the registered ``module:attr``, never a caller's text) and call it on ``inputs``."""
    import importlib

    module_name, _, attr = spec.target.partition(":")
    function: Callable[[LossInputs], LossResult] = getattr(importlib.import_module(module_name), attr)
    return function(inputs)


def call_here(spec: LossSpec, inputs: LossInputs, cache_dir: Path | None = None) -> LossResult:
    """``spec``'s loss in this process, with the source folders the original needs
    (:func:`repliscope.diff.loss.originals.source_paths`, fetched when missing) on ``sys.path``."""
    from repliscope.diff.loss.originals import source_paths

    for folder in source_paths(spec.name, cache_dir):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    return _call_target(spec, inputs)


def run_loss(
    name_or_spec: str | LossSpec,
    inputs: LossInputs,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    cache_dir: Path | None = None,
    on_line: Callable[[str], None] | None = None,
) -> LossResult:
    """The registered loss ``name_or_spec`` on ``inputs``: here when :func:`in_stack`, else in its stack (an
    existing stack of that spec, else created; ``on_line`` gets the stack build's lines). LossCallError naming the
    loss and the stack when the child fails, exceeds ``timeout`` seconds or returns something unreadable."""
    spec = _spec(name_or_spec)
    if in_stack(spec):
        return call_here(spec, inputs, cache_dir)
    from repliscope.stacks.store import create_stack, get_stack

    assert spec.stack is not None
    try:  # an existing stack of this exact spec: no resolution (pip's dry run takes ~10 s)
        stack = get_stack(spec.stack, cache_dir)
    except StackError:
        stack = create_stack(spec.stack, on_line=on_line, cache_dir=cache_dir)
    return call_in_stack(spec, inputs, stack.python_executable, stack.key, timeout=timeout, cache_dir=cache_dir)


def call_in_stack(
    spec: LossSpec,
    inputs: LossInputs,
    python: Path,
    stack_key: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    cache_dir: Path | None = None,
) -> LossResult:
    """Run ``spec`` (by its registered name) with the interpreter ``python`` of stack ``stack_key``; the source
    folders the original needs are fetched HERE (a stack has no pip) and given to the child as its PYTHONPATH."""
    from repliscope.diff.loss.originals import source_paths

    where = f"loss '{spec.name}' in stack {stack_key}"
    with tempfile.TemporaryDirectory(prefix="repliscope-loss-") as tmp:
        into, out = Path(tmp) / "inputs.npz", Path(tmp) / "result.npz"
        save_inputs(inputs, into)
        _run_child(python, "loss", spec.name, into, out, source_paths(spec.name, cache_dir), where, timeout)
        result = load_result(out)
    check_result(result, inputs, where)
    return result


def check_result(result: LossResult, inputs: LossInputs, where: str) -> None:
    """LossCallError when the total or a component is not finite, or a gradient names an output that does not
    exist or has another shape."""
    if not math.isfinite(result.total):
        raise LossCallError(f"{where}: the total is {result.total}, not a finite number")
    for key, value in result.components.items():
        if not math.isfinite(value):
            raise LossCallError(f"{where}: the component '{key}' is {value}, not a finite number")
    for key, grad in result.gradients.items():
        if key not in inputs.outputs:
            raise LossCallError(
                f"{where}: a gradient for '{key}', which is not an output ({', '.join(inputs.outputs)})"
            )
        if grad.shape != inputs.outputs[key].shape:
            raise LossCallError(
                f"{where}: the gradient of '{key}' has shape {grad.shape}, the output {inputs.outputs[key].shape}"
            )


def _text(stream: str | bytes | None) -> str:
    if stream is None:
        return ""
    return stream.decode("utf-8", "replace") if isinstance(stream, bytes) else stream


def _last_line(stderr: str | bytes | None) -> str:
    lines = [line for line in _text(stderr).splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no message on stderr"


def _tail(stderr: str | bytes | None) -> str:
    lines: deque[str] = deque((line for line in _text(stderr).splitlines() if line.strip()), maxlen=STDERR_TAIL)
    return ("\nlast lines of its stderr:\n" + "\n".join(lines)) if lines else ""


# -- registered tasks (an original's code other than a loss) ------------------------------------------------------


TASKS: dict[str, tuple[str, str, str]] = {
    "tfmg_yolo_input": ("repliscope.diff.augment.tfmg_pipeline:child", "tfmg_yolo", "tfmg_yolo"),
    "tfmg_yolov3_tiny_gradients": ("repliscope.diff.training.tfmg_port:child", "tfmg_yolo", "tfmg_yolo"),
}
"""Task name -> (target ``module:function(IN, OUT)``, the loss whose stack it runs in, the loss whose source
folders it needs): the Model Garden's training augmentation (``yolo_input``) and its YOLOv3-tiny's gradients. The
target reads IN and writes OUT itself (.npz read with ``allow_pickle=False``); only these names cross."""


def run_task(
    name: str, into: Path, out: Path, *, timeout: float = DEFAULT_TIMEOUT, cache_dir: Path | None = None
) -> None:
    """Run the registered task ``name`` on the file ``into`` in its stack (created on demand), writing ``out``.
    LossCallError naming the task and the stack when the child fails or exceeds ``timeout`` seconds."""
    from repliscope.diff.loss.originals import source_paths
    from repliscope.stacks.store import create_stack, get_stack

    if name not in TASKS:
        raise LossCallError(f"task {name!r} is not registered (allowed: {', '.join(TASKS)})")
    _, loss, sources = TASKS[name]
    spec = LOSSES.get(loss)
    assert spec.stack is not None
    try:
        stack = get_stack(spec.stack, cache_dir)
    except StackError:
        stack = create_stack(spec.stack, cache_dir=cache_dir)
    where = f"task '{name}' in stack {stack.key}"
    _run_child(stack.python_executable, "task", name, into, out, source_paths(sources, cache_dir), where, timeout)


def _run_child(
    python: Path, mode: str, name: str, into: Path, out: Path, paths: Sequence[Path], where: str, timeout: float
) -> None:
    """``python -m repliscope.stacks.call MODE NAME IN OUT`` with no stdin, only ``paths`` on PYTHONPATH, no user
    site; LossCallError naming ``where`` when it cannot start, exceeds ``timeout`` seconds, fails or writes no
    ``out``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    env.update(PYTHONNOUSERSITE="1", TF_CPP_MIN_LOG_LEVEL="3")
    cmd = [str(python), "-m", "repliscope.stacks.call", mode, name, str(into), str(out)]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise LossCallError(
            f"{where}: no result after {timeout:g} s (the child was stopped)" + _tail(exc.stderr)
        ) from None
    except OSError as exc:
        raise LossCallError(f"{where}: cannot start {python} ({exc.strerror or exc})") from None
    if proc.returncode != 0:
        raise LossCallError(
            f"{where} failed (exit {proc.returncode} after {time.perf_counter() - start:.1f} s): "
            f"{_last_line(proc.stderr)}" + _tail(proc.stderr)
        )
    if not out.is_file():
        raise LossCallError(f"{where}: the child exited 0 without writing its result" + _tail(proc.stderr))


# -- the child ----------------------------------------------------------------------------------------------------


USAGE = "usage: python -m repliscope.stacks.call loss NAME IN.npz OUT.npz (NAME: a registered loss)"


def main(argv: Sequence[str] | None = None) -> int:
    """``loss NAME IN.npz OUT.npz``: run the registered loss NAME here on IN (``task NAME IN OUT``, what
    :func:`run_task` starts: the registered task NAME's target on IN, writing OUT) (its source folders are on the
    PYTHONPATH the parent set), write the result to OUT. Exit 2 with
    one line on stderr for a bad command line, an unknown name or a RepliscopeError; other exceptions propagate
    (their traceback is the stderr tail the parent shows)."""
    from repliscope.errors import RepliscopeError

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 4 or args[0] not in ("loss", "task"):
        print(f"error: {USAGE}", file=sys.stderr)
        return 2
    kind, name, into, out = args
    if kind == "task":
        if name not in TASKS:
            print(f"error: task {name!r} is not registered (allowed: {', '.join(TASKS)})", file=sys.stderr)
            return 2
        module_name, _, attr = TASKS[name][0].partition(":")
        import importlib

        try:
            getattr(importlib.import_module(module_name), attr)(Path(into), Path(out))
        except RepliscopeError as exc:
            print(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
            return 2
        return 0
    try:
        spec = LOSSES.get(name)
        inputs = load_inputs(Path(into))
        result = _call_target(spec, inputs)
        save_result(result, Path(out))
    except RepliscopeError as exc:
        print(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A torch re-implementation (``--candidate module:function``) compared with the torch reference.

The factory ``module:function`` (``module`` importable, or a ``path/to/file.py:function``) is called with no
arguments and must return a ``torch.nn.Module``; if it takes one argument it receives the reference module
(so a port can copy the reference weights: ``def build(reference): ...``). Its units are its own layers,
found exactly as the reference's are (:class:`~repliscope.diff.layers.torch_reference.TorchReference`: leaf modules or
modules with their own weights, ``path#n`` for the n-th call), so a port with the same module tree maps by
name and any other needs ``--mapping`` or the proposed mapping.

* golden (``run_layer``): the candidate's module ``name`` called on the reference inputs (as torch tensors);
  a functional op unit (``layer1.0/add``) is REPLAYED: its torch function, recorded with its arguments on a
  forward of the same batch (so shape arguments such as a ``reshape``'s sizes fit), is called again with the
  reference inputs in place of its activation tensors (parameters, buffers and Python arguments kept);
* carried (``forward_layers``): the candidate's own forward, its mapped outputs streamed from a worker
  thread through a one-slot queue, so at most one copied activation waits at a time.

Layout: NCHW in and out (torch on both sides).
"""

from __future__ import annotations

import contextlib
import inspect
import queue
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from repliscope.diff.base import CANDIDATES
from repliscope.diff.layers.mapping import NamedCandidate, UnitInfo, check_unit_inputs
from repliscope.diff.layers.torch_reference import TorchReference
from repliscope.errors import RepliscopeError
from repliscope.manifest.code_refs import REF_PATTERN, CodeRefError, FactoryAttributeError, check_public, walk_attrs

_DONE = object()
_VIEWS = {"detach", "cpu", "numpy", "clone", "contiguous", "__get__"}


class _Recorder(TorchFunctionMode):
    """Keeps the last torch function calls that returned a tensor: (func, args, kwargs, output)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: deque[tuple[Any, tuple[Any, ...], dict[str, Any], torch.Tensor]] = deque(maxlen=16)

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if isinstance(out, torch.Tensor) and getattr(func, "__name__", "") not in _VIEWS:
            self.calls.append((func, args, kwargs, out))
        return out


def load_factory(spec: str) -> Any:
    """``module:function`` or ``file.py:function`` -> the callable (imported, never called here).

    ``--candidate`` is the invoking user's own code on their own command line (like ``python file.py``), never a
    manifest or service field; its attribute path follows the rules of :mod:`repliscope.manifest.code_refs` (public
    names only, no module reached as an attribute)."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr or not REF_PATTERN.match(f"x:{attr}"):
        raise RepliscopeError(f"torch candidate '{spec}': expected module:function or path/to/file.py:function")
    try:
        check_public(attr.split("."), spec, "torch candidate", "")
    except CodeRefError as exc:
        raise RepliscopeError(str(exc)) from None
    from repliscope.user_code import import_user_module

    module = import_user_module(target, "--candidate", spec)
    try:  # the shared walk: no private attribute, no module reached as an attribute, a callable at the end
        obj, _ = walk_attrs(module, target, attr.split("."), scope=None, what="torch candidate", text=spec, field="")
    except FactoryAttributeError as exc:
        raise RepliscopeError(f"torch candidate '{spec}': {exc}") from None
    except CodeRefError as exc:
        message = str(exc) if str(exc).startswith("torch candidate") else f"torch candidate '{spec}': {exc}"
        raise RepliscopeError(message) from None
    return obj


class TorchCandidate(NamedCandidate):
    """A torch module (eval mode) under its own layer paths."""

    name = "torch"
    spans_gaps = False

    def __init__(self, module: torch.nn.Module, source: str = "") -> None:
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise RepliscopeError(
                f"torch candidate {source}: the factory returned {type(module).__name__}, not a torch.nn.Module"
            )
        self.observed = TorchReference(module, name="torch candidate")
        self.module = self.observed.module
        self.source = source
        self._units: list[UnitInfo] | None = None
        self._ops: set[str] = set()
        self._replay: dict[str, tuple[Any, tuple[Any, ...], dict[str, Any], list[int]]] = {}

    @classmethod
    def from_path(cls, path: str | Path, reference_module: Any) -> TorchCandidate:
        """Build from ``module:function``; the function gets the reference module if it takes one argument."""
        factory = load_factory(str(path))
        try:
            takes_reference = len(inspect.signature(factory).parameters) >= 1
        except (TypeError, ValueError):
            takes_reference = False
        try:
            module = factory(reference_module) if takes_reference else factory()
        except Exception as exc:
            raise RepliscopeError(f"torch candidate '{path}': the factory failed: {type(exc).__name__}: {exc}") from exc
        return cls(module, source=str(path))

    def units(self, x: np.ndarray) -> list[UnitInfo]:
        if self._units is None:
            traced = self.observed.trace(x)
            self._units = [UnitInfo(t.info.path, t.info.kind, tuple(t.output_shape)) for t in traced]
            self._ops = {t.info.path for t in traced if getattr(t.info, "op", "")}
            if self._ops:
                self._record_ops(x)
        return self._units

    def _record_ops(self, probe: np.ndarray) -> None:
        """Bind every functional op unit to its torch call (function, arguments) on a forward of ``probe`` (the
        batch golden mode will run: Python shape arguments are replayed as recorded)."""
        from repliscope.diff.layers.ref_ops import activation_inputs

        constants = {id(t) for t in (*self.module.parameters(), *self.module.buffers())}
        recorder = _Recorder()

        def on_end(path: str, inputs: list[np.ndarray], output: np.ndarray) -> None:
            if path not in self._ops:
                return
            address = output.__array_interface__["data"][0]
            for func, args, kwargs, out in reversed(recorder.calls):  # the op just run is the newest
                if out.data_ptr() == address and tuple(out.shape) == output.shape:
                    ids = [id(t) for t in activation_inputs(args, kwargs, constants)]
                    self._replay[path] = (func, args, kwargs, ids)
                    break

        with recorder:
            self.observed.run(probe, None, on_end)

    def _names(self) -> list[str]:
        if self._units is None:
            return [p for p, _ in self.module.named_modules() if p]
        return [u.name for u in self._units]

    def describe(self) -> dict[str, str]:
        return {
            "candidate": self.name,
            "model": type(self.module).__qualname__,
            "source": self.source,
            "torch": torch.__version__,
        }

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        if path in self._ops:
            return self._replay_op(path, inputs)
        base = path.split("#", 1)[0]
        try:
            sub = self.module.get_submodule(base) if base else self.module
        except AttributeError as exc:
            raise RepliscopeError(f"torch candidate: no module '{base}'") from exc
        args = [torch.from_numpy(np.array(a, copy=True)) for a in inputs]
        try:
            with torch.inference_mode():
                out = sub(*args)
        except (RuntimeError, TypeError, ValueError) as exc:
            raise RepliscopeError(
                f"torch candidate: module '{path}' failed on the reference inputs: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(out, torch.Tensor):
            raise RepliscopeError(f"torch candidate: module '{path}' returned {type(out).__name__}, not a tensor")
        return out.detach().cpu().numpy()

    def _replay_op(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        if path not in self._replay:
            raise RepliscopeError(f"torch candidate: the call of op '{path}' was not recorded on the probe forward")
        func, args, kwargs, ids = self._replay[path]
        check_unit_inputs(f"torch candidate: op '{path}'", len(ids), len(inputs))
        new = {i: torch.from_numpy(np.array(a, copy=True)) for i, a in zip(ids, inputs, strict=True)}

        def swap(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                return new.get(id(value), value)
            if isinstance(value, list | tuple):
                return type(value)(swap(v) for v in value)
            return value

        try:
            with torch.inference_mode():
                out = func(*[swap(a) for a in args], **{k: swap(v) for k, v in kwargs.items()})
        except (RuntimeError, TypeError, ValueError) as exc:
            raise RepliscopeError(
                f"torch candidate: replaying op '{path}' on the reference inputs failed: {type(exc).__name__}: {exc}"
            ) from exc
        return out.detach().cpu().numpy()

    def output(self, x: np.ndarray) -> np.ndarray | None:
        """The module's output on ``x`` (NCHW), e.g. float32 logits (N, C)."""
        return self.observed.run(x)

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        wanted = set(paths)
        slot: queue.Queue[Any] = queue.Queue(maxsize=1)
        stop = threading.Event()

        def on_end(path: str, inputs: list[np.ndarray], output: np.ndarray) -> None:
            if path in wanted and not stop.is_set():
                slot.put((path, np.array(output, copy=True)))

        def work() -> None:
            try:
                self.observed.run(x, None, on_end)
                slot.put(_DONE)
            except BaseException as exc:  # handed to the consumer, raised there
                slot.put(exc)

        worker = threading.Thread(target=work, name="repliscope-torch-candidate", daemon=True)
        worker.start()
        try:
            while (item := slot.get()) is not _DONE:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            while worker.is_alive():
                with contextlib.suppress(queue.Empty):
                    slot.get(timeout=0.05)
            worker.join()


CANDIDATES.add("torch", TorchCandidate)

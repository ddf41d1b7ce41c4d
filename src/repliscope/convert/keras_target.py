"""Apply a :mod:`~repliscope.convert.mapping` to a torch state_dict and a Keras 3 model (TensorFlow backend).

Every problem is collected before anything is reported, so one error lists EVERY offender: torch tensors no
rule maps (and no ``ignore`` glob covers), tensors a rule's kind does not convert, targets that do not exist,
Keras weights that two tensors map to, shape mismatches (source, transformed and target shape), Keras weights
nothing maps to, and batch-norm epsilons that differ from the torch module's (``batch_norm_epsilon: check``).
Nothing is assigned unless the whole plan is clean.

Keras (and TensorFlow) are imported lazily, on first use, with the backend forced to TensorFlow.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from repliscope.convert.mapping import LayerMapping, MappingError, split_key, transform
from repliscope.errors import RepliscopeError

_PROBLEM_TITLES = {
    "unmapped": "torch tensors no rule maps (add a rule, or an 'ignore' glob if dropping them is intended)",
    "unhandled": "torch tensors the matched rule's kind does not convert",
    "missing_target": "targets that do not exist in the Keras model",
    "duplicate_target": "Keras weights mapped more than once",
    "shape": "shape mismatches (source -> transformed vs target)",
    "unassigned": "Keras weights nothing maps to (they would keep their random initial values)",
    "epsilon": "batch-norm epsilons that differ (torch module vs Keras layer)",
}


class ConversionError(RepliscopeError):
    """The mapping does not fit the state_dict and the Keras model; ``problems`` maps a category (keys of
    ``_PROBLEM_TITLES``) to every offender, and the message lists them all."""

    def __init__(self, problems: dict[str, list[str]]) -> None:
        self.problems = {k: v for k, v in problems.items() if v}
        count = sum(len(v) for v in self.problems.values())
        parts = [f"weight conversion refused: {count} problem(s)"]
        for key, items in self.problems.items():
            parts.append(f"\n  {_PROBLEM_TITLES[key]} ({len(items)}):")
            parts.extend(f"\n    - {item}" for item in items)
        super().__init__("".join(parts))


@dataclass
class ConversionReport:
    """What a successful conversion did."""

    assigned: dict[str, str] = field(default_factory=dict)
    """Keras weight path -> torch state_dict key."""
    ignored: list[str] = field(default_factory=list)
    epsilon_set: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def import_keras() -> ModuleType:
    """``keras`` on the TensorFlow backend, TensorFlow's C++ logging quiet. Refuses another active backend."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")  # the default; set explicitly it stops an info banner
    try:
        import keras
    except ImportError as exc:
        raise RepliscopeError(
            "Keras conversion needs keras>=3 and tensorflow: pip install keras tensorflow-cpu"
        ) from exc
    if keras.backend.backend() != "tensorflow":
        raise RepliscopeError(
            f"keras is running on the '{keras.backend.backend()}' backend; repliscope's Keras "
            "support needs KERAS_BACKEND=tensorflow set before keras is first imported"
        )
    return keras


def to_numpy(tensor: Any) -> np.ndarray:
    """A torch tensor (without importing torch) or array-like -> numpy."""
    if hasattr(tensor, "detach"):
        tensor = tensor.detach().cpu().numpy()
    return np.asarray(tensor)


def keras_weights(model: Any) -> dict[str, Any]:
    """``"layer/weight"`` -> Keras variable, for every weight of the model."""
    return {v.path: v for v in model.weights}


def plan_conversion(
    state_dict: Mapping[str, Any],
    model: Any,
    mapping: LayerMapping,
    reference_module: Any | None = None,
) -> tuple[dict[str, tuple[str, np.ndarray]], ConversionReport, dict[str, list[str]]]:
    """The conversion plan ``{keras weight path: (torch key, array)}``, the report, and the problems found."""
    targets = keras_weights(model)
    layer_names = {layer.name for layer in model.layers}
    problems: dict[str, list[str]] = defaultdict(list)
    report = ConversionReport()
    plan: dict[str, tuple[str, np.ndarray]] = {}
    sources: dict[str, list[str]] = defaultdict(list)
    bn_modules: dict[str, str] = {}
    for key in state_dict:
        if mapping.ignored(key):
            report.ignored.append(key)
            continue
        module_path, tensor_name = split_key(key)
        found = mapping.match(module_path)
        if found is None:
            problems["unmapped"].append(f"{key} {_shape(state_dict[key])}")
            continue
        rule, layer = found
        table = rule.tensors()
        if tensor_name not in table:
            problems["unhandled"].append(
                f"{key}: rule '{rule.torch}' (kind {rule.kind}) converts "
                f"{', '.join(table) or 'no tensors'}, not '{tensor_name}'"
            )
            continue
        if rule.kind == "batch_norm":
            bn_modules[module_path] = layer
        tensor_rule = table[tensor_name]
        target = f"{layer}/{tensor_rule.keras_weight}"
        sources[target].append(key)
        if target not in targets:
            if layer in layer_names:
                have = [p.split("/", 1)[1] for p in targets if p.startswith(layer + "/")]
                hint = f"layer '{layer}' has {', '.join(have) or 'no weights'}"
            else:
                hint = f"no Keras layer is named '{layer}'"
            problems["missing_target"].append(f"{key} -> {target}: {hint}")
            continue
        try:
            array = transform(to_numpy(state_dict[key]), tensor_rule)
        except MappingError as exc:
            problems["shape"].append(f"{key} {_shape(state_dict[key])} -> {target}: {exc}")
            continue
        want = tuple(targets[target].shape)
        if tuple(array.shape) != want:
            perm = "" if tensor_rule.permute is None else f" by permute {list(tensor_rule.permute)}"
            problems["shape"].append(
                f"{key} {_shape(state_dict[key])} -> transformed{perm} {tuple(array.shape)} vs {target} {want}"
            )
            continue
        plan[target] = (key, array)
    for target, keys in sources.items():
        if len(keys) > 1:
            problems["duplicate_target"].append(f"{target} <- {', '.join(keys)}")
            plan.pop(target, None)
    problems["unassigned"].extend(f"{p} {tuple(v.shape)}" for p, v in targets.items() if p not in sources)
    _check_epsilons(bn_modules, model, mapping, reference_module, report, problems)
    return plan, report, problems


def _check_epsilons(
    bn_modules: dict[str, str],
    model: Any,
    mapping: LayerMapping,
    reference_module: Any | None,
    report: ConversionReport,
    problems: dict[str, list[str]],
) -> None:
    policy = mapping.spec.batch_norm_epsilon
    if reference_module is None:
        if bn_modules and policy != "ignore":
            report.notes.append("batch-norm epsilons not checked: no torch module given (a state_dict holds none)")
        return
    for module_path, layer_name in bn_modules.items():
        try:
            torch_eps = float(reference_module.get_submodule(module_path).eps)
            layer = model.get_layer(layer_name)
        except (AttributeError, ValueError):
            continue  # reported elsewhere (missing target) or not a batch norm
        keras_eps = float(layer.epsilon)
        if np.isclose(torch_eps, keras_eps, rtol=1e-6, atol=0.0):
            continue
        text = f"{module_path} eps={torch_eps:g} vs {layer_name} epsilon={keras_eps:g}"
        if policy == "check":
            problems["epsilon"].append(text)
        elif policy == "set":
            layer.epsilon = torch_eps
            report.epsilon_set.append(text)
        else:
            report.notes.append(f"epsilon differs (policy ignore): {text}")


def convert_state_dict(
    state_dict: Mapping[str, Any],
    model: Any,
    mapping: LayerMapping,
    reference_module: Any | None = None,
) -> ConversionReport:
    """Assign every mapped tensor to ``model``; raises :class:`ConversionError` listing every problem first.

    ``reference_module`` (the torch module the state_dict belongs to) enables the batch-norm epsilon check.
    """
    plan, report, problems = plan_conversion(state_dict, model, mapping, reference_module)
    if any(problems.values()):
        raise ConversionError(problems)
    variables = keras_weights(model)
    for target, (key, array) in plan.items():
        variables[target].assign(array.astype(variables[target].dtype, copy=False))
        report.assigned[target] = key
    return report


def load_port(source: str | Path, mapping: LayerMapping | None = None, **kwargs: Any) -> Any:
    """Build the Keras model of a port: ``source`` is ``"dir/file.py:function"``, a ``.py`` file or a directory
    (``mapping.keras_model`` names the function, default ``model.py:build_model``). ``kwargs`` go to it."""
    import_keras()
    text = str(source)
    spec_attr = "build_model"
    if ":" in Path(text).name:
        text, _, spec_attr = text.rpartition(":")
    path = Path(text)
    if path.is_dir():
        spec_text = (
            mapping.spec.keras_model if mapping is not None and mapping.spec.keras_model else "model.py:build_model"
        )
        file_part, _, attr = spec_text.partition(":")
        path, spec_attr = path / file_part, attr or "build_model"
    if not path.is_file():
        raise RepliscopeError(
            f"Keras port '{source}': no such file '{path}' (give a directory with model.py, a .py "
            "file, or 'file.py:function')"
        )
    factory = _import_attr(path, spec_attr)
    model = factory(**kwargs)
    if not hasattr(model, "layers") or not hasattr(model, "weights"):
        raise RepliscopeError(f"'{path}:{spec_attr}' returned {type(model).__name__}, not a Keras model")
    return model


def import_port_file(path: Path) -> ModuleType:
    """Import a port's Python file by path (once per process); its folder is importable while it loads, so it
    may import its sibling modules."""
    name = f"repliscope_port_{abs(hash(str(path.resolve())))}"
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RepliscopeError(f"cannot import the Keras port '{path}'")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except Exception:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.path.remove(str(path.parent))
    return module


def _import_attr(path: Path, attr: str) -> Callable[..., Any]:
    factory = getattr(import_port_file(path), attr, None)
    if not callable(factory):
        raise RepliscopeError(f"the Keras port '{path}' has no function '{attr}'")
    return factory


def _shape(tensor: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in tensor.shape)

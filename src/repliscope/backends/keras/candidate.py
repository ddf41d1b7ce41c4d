"""A Keras 3 re-implementation (TensorFlow backend, NHWC) as a layer-level diff candidate.

The mapping file (:mod:`repliscope.convert.mapping`) that converts the weights also says which Keras layer
produces each torch module's output. A torch module and its Keras counterpart must take the SAME input, so the
counterpart of a module (a "unit") is its mapped Keras layer plus the Keras layers directly before it that no
rule claims: the explicit ``ZeroPadding2D`` of a "static same" conv (torch pads inside the conv module), a
flatten, or a channel flip at the model input. The walk back stops at a layer some rule claims, at the model
input, and at any layer with several inputs or consumers.

Layouts: everything crossing the :class:`~repliscope.diff.base.Candidate` interface is in the reference (torch)
layout; 4-D arrays are transposed NCHW -> NHWC on the way in and back on the way out, other ranks pass as is.
A module forward() calls several times (a shared activation) is ``path`` on its first call and ``path#k`` on
its k-th, as the reference names them. A reference layer nested in a mapped one (``_conv_stem.static_padding``)
is computed by the mapped layer's unit and reported through :meth:`KerasCandidate.covers`.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from repliscope.convert.keras_target import convert_state_dict, import_keras, load_port
from repliscope.convert.mapping import LayerMapping, load_mapping
from repliscope.diff.base import CANDIDATES, Candidate, LayerInfo
from repliscope.diff.layers.mapping import NamedCandidate, UnitInfo, check_unit_inputs
from repliscope.errors import RepliscopeError


def to_keras_layout(x: np.ndarray) -> np.ndarray:
    """NCHW -> NHWC for 4-D arrays; anything else unchanged."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if x.ndim == 4 else x


def to_reference_layout(x: np.ndarray) -> np.ndarray:
    """NHWC -> NCHW for 4-D arrays; anything else unchanged."""
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if x.ndim == 4 else x


PORT_FORMS = "a port folder (model.py + mapping.yaml), its mapping .yaml, or a converted .keras file"


def check_port_path(path: Path) -> Path:
    """``path`` if it can name a Keras port (an existing folder, ``.keras`` file or ``.yaml``/``.yml`` mapping
    file); else a RepliscopeError naming the accepted forms (an ONNX model or a binary file never reaches the
    YAML reader)."""
    path = Path(path)
    if not path.exists():
        raise RepliscopeError(f"Keras candidate '{path}': no such file or folder (give {PORT_FORMS})")
    if path.is_file() and path.suffix.lower() not in (".keras", ".yaml", ".yml"):
        hint = "; an ONNX model is compared with --runtimes torch onnxruntime" if path.suffix == ".onnx" else ""
        raise RepliscopeError(
            f"Keras candidate '{path}': a '{path.suffix or 'suffix-less'}' file is not a Keras "
            f"port (give {PORT_FORMS}){hint}"
        )
    mapping = path / "mapping.yaml" if path.is_dir() else path
    if mapping.suffix.lower() != ".keras" and mapping.is_file():
        try:
            mapping.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RepliscopeError(
                f"Keras candidate '{path}': the mapping file '{mapping}' is not UTF-8 text (byte "
                f"{exc.start}); a mapping is YAML"
            ) from None
    return path


class KerasCandidate(Candidate):
    """A Keras functional model compared with the torch reference through a mapping file."""

    name: ClassVar[str] = "keras"

    def __init__(self, model: Any, mapping: LayerMapping, source: str = "") -> None:
        self.keras = import_keras()
        self.model = model
        self.mapping = mapping
        self.source = source
        self._layers = {layer.name: layer for layer in model.layers}
        self._claim_patterns = [_template_regex(rule.keras) for rule in mapping.spec.layers]
        self._units: dict[str, list[Any]] = {}
        self._covers: dict[str, list[str]] = {}

    # -- construction -------------------------------------------------------------------------------------------
    @classmethod
    def from_path(cls, path: Path, reference_module: Any) -> KerasCandidate:
        """``path`` is a port directory (``model.py`` + ``mapping.yaml``: the model is built and the reference
        module's weights converted into it), its ``mapping.yaml``, or a converted ``.keras`` file (its mapping is
        ``<name>.mapping.yaml`` or ``mapping.yaml`` beside it)."""
        path = check_port_path(Path(path))
        if path.suffix == ".keras":
            mapping = load_mapping(_sidecar_mapping(path))
            keras = import_keras()
            try:
                model = keras.saving.load_model(path, compile=False)
            except Exception as exc:
                raise RepliscopeError(f"cannot load the Keras model '{path}': {type(exc).__name__}: {exc}") from exc
            return cls(model, mapping, source=str(path))
        directory = path.parent if path.is_file() else path
        mapping_file = path if path.is_file() else path / "mapping.yaml"
        if not mapping_file.is_file():
            raise RepliscopeError(
                f"Keras candidate '{path}': no mapping file '{mapping_file}' (a port directory "
                "holds model.py and mapping.yaml)"
            )
        mapping = load_mapping(mapping_file)
        model = load_port(directory, mapping)
        convert_state_dict(reference_module.state_dict(), model, mapping, reference_module)
        return cls(model, mapping, source=str(directory))

    def describe(self) -> dict[str, str]:
        return {
            "candidate": self.name,
            "model": str(self.model.name),
            "source": self.source,
            "mapping": str(self.mapping.path or "<in memory>"),
        }

    # -- Candidate interface ------------------------------------------------------------------------------------
    def mapped_layers(self, reference_layers: Sequence[LayerInfo]) -> list[str]:
        paths, missing = [], []
        for info in reference_layers:
            found = self.mapping.match(info.path)
            if found is None:
                continue
            if found[1] not in self._layers:
                missing.append(f"{info.path} -> {found[1]}")
                continue
            paths.append(info.path)
        if missing:
            raise RepliscopeError(
                f"the mapping names Keras layers the model '{self.model.name}' does not have: " + ", ".join(missing)
            )
        mapped = set(paths)
        self._covers = {
            p: [p]
            + [i.path for i in reference_layers if "#" not in p and i.path.startswith(p + ".") and i.path not in mapped]
            for p in paths
        }
        return paths

    def covers(self, path: str) -> list[str]:
        """``path`` plus the unmapped reference layers nested in it (a "same" conv's ``static_padding``): the
        Keras unit computes them too (e.g. ``block3_dw_pad`` + ``block3_dw_conv``)."""
        return self._covers.get(path, [path])

    def unit(self, path: str) -> list[Any]:
        """The Keras layers (in call order) that together correspond to the torch module ``path``."""
        if path not in self._units:
            found = self.mapping.match(path)
            if found is None:
                raise RepliscopeError(f"no mapping rule matches the torch module '{path}'")
            layer = self._layers.get(found[1])
            if layer is None:
                raise RepliscopeError(f"'{path}' maps to Keras layer '{found[1]}', which the model does not have")
            chain = [layer]
            while (prev := self._absorbable_parent(chain[0])) is not None:
                chain.insert(0, prev)
            self._units[path] = chain
        return self._units[path]

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        chain = self.unit(path)
        args = [to_keras_layout(np.asarray(x, dtype=np.float32)) for x in inputs]
        x: Any = args[0] if len(args) == 1 else args
        for layer in chain:
            x = layer(x, training=False)
        return to_reference_layout(self.keras.ops.convert_to_numpy(x))

    def output(self, x: np.ndarray) -> np.ndarray | None:
        """The port's whole-model output on ``x`` (reference layout in and out, e.g. logits (N, 1000))."""
        out = self.model(to_keras_layout(np.asarray(x, dtype=np.float32)), training=False)
        return to_reference_layout(self.keras.ops.convert_to_numpy(out))

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        """Run the functional graph node by node, yielding the output of each requested path's unit as soon as
        it is computed and dropping every intermediate tensor once its last consumer has run."""
        wanted: dict[int, list[str]] = {}
        for path in paths:
            out_tensor = self.unit(path)[-1]._inbound_nodes[0].outputs[0]
            wanted.setdefault(id(out_tensor), []).append(path)
        yield from stream_outputs(self.keras, self.model, x, wanted)

    # -- helpers ------------------------------------------------------------------------------------------------
    def claimed(self, layer_name: str) -> bool:
        """Whether some mapping rule names this Keras layer (then it is a unit of its own)."""
        return any(p.fullmatch(layer_name) for p in self._claim_patterns)

    def _absorbable_parent(self, layer: Any) -> Any | None:
        nodes = layer._inbound_nodes
        if len(nodes) != 1 or len(nodes[0].input_tensors) != 1:
            return None
        parent = nodes[0].input_tensors[0]._keras_history.operation
        if isinstance(parent, self.keras.layers.InputLayer) or self.claimed(parent.name):
            return None
        if (
            len(parent._inbound_nodes) != 1
            or len(parent._inbound_nodes[0].input_tensors) != 1
            or len(parent._outbound_nodes) != 1
        ):
            return None
        return parent


def stream_outputs(
    keras: Any, model: Any, x: np.ndarray, wanted: dict[int, list[str]]
) -> Iterator[tuple[str, np.ndarray]]:
    """Run the functional ``model`` node by node on ``x`` (reference layout), yielding (name, output in the
    reference layout) for every name in ``wanted`` (``id`` of a Keras output tensor -> names) as soon as it is
    computed, and dropping every intermediate tensor once its last consumer has run."""
    nodes = [n for depth in sorted(model._nodes_by_depth, reverse=True) for n in model._nodes_by_depth[depth]]
    consumers: Counter[int] = Counter()
    for node in nodes:
        for t in node.input_tensors:
            consumers[id(t)] += 1
    values: dict[int, Any] = {id(model.inputs[0]): to_keras_layout(np.asarray(x, dtype=np.float32))}
    for node in nodes:
        if not node.operation or node.is_input:
            continue
        args, kwargs = node.arguments.fill_in(values)
        if isinstance(node.operation, keras.layers.Layer):
            kwargs = {**kwargs, "training": False}
        out = node.operation(*args, **kwargs)
        for t in node.input_tensors:
            consumers[id(t)] -= 1
            if consumers[id(t)] <= 0:
                values.pop(id(t), None)
        for t, value in zip(node.outputs, keras.tree.flatten(out), strict=True):
            for name in wanted.get(id(t), ()):
                yield name, to_reference_layout(keras.ops.convert_to_numpy(value))
            if consumers[id(t)] > 0:
                values[id(t)] = value


class KerasLayersCandidate(NamedCandidate):
    """Any functional Keras model (e.g. a ``.keras`` file without a conversion mapping) under its own layer
    names, paired with the reference by ``--mapping`` or the proposed mapping. Units: every layer but the
    input, in graph order; golden: the layer called on the reference inputs (layout converted);
    carried: :func:`stream_outputs`. NHWC for 4-D tensors, like every Keras image model."""

    name: ClassVar[str] = "keras"
    layout: ClassVar[str] = "NHWC"
    output_layout: ClassVar[str] = "reference"

    def __init__(self, model: Any, source: str = "") -> None:
        super().__init__()
        self.keras = import_keras()
        self.model = model
        self.source = source
        self._layers = {
            layer.name: layer for layer in model.layers if not isinstance(layer, self.keras.layers.InputLayer)
        }

    def chain(self, name: str) -> tuple[list[Any], list[Any]]:
        """(graph nodes in execution order, external input tensors in the order they are read) of the golden unit
        ending at layer ``name``: it and every unmapped layer it depends on back to mapped layers or the model
        input (an explicit ``ZeroPadding2D`` the torch conv does inside; a whole block under a sparse mapping)."""
        layer = self._layers.get(name)
        if layer is None:
            raise RepliscopeError(f"the Keras model '{self.model.name}' has no layer '{name}'")
        inside = {id(layer)}
        todo = [layer]
        while todo:
            for t in todo.pop()._inbound_nodes[0].input_tensors:
                parent = t._keras_history.operation
                if (
                    isinstance(parent, self.keras.layers.InputLayer)
                    or parent.name in self._mapped
                    or id(parent) in inside
                ):
                    continue
                inside.add(id(parent))
                todo.append(parent)
        nodes = [
            n
            for depth in sorted(self.model._nodes_by_depth, reverse=True)
            for n in self.model._nodes_by_depth[depth]
            if n.operation is not None and id(n.operation) in inside
        ]
        produced = {id(t) for n in nodes for t in n.outputs}
        external: list[Any] = []
        for node in nodes:
            for t in node.input_tensors:
                if id(t) not in produced and all(t is not e for e in external):
                    external.append(t)
        return nodes, external

    def input_units(self, name: str) -> list[str | None] | None:
        """The layers whose outputs the golden unit ending at ``name`` reads, in its order (None: the model input)."""
        _, external = self.chain(name)
        found = [t._keras_history.operation for t in external]
        return [None if isinstance(op, self.keras.layers.InputLayer) else op.name for op in found]

    @classmethod
    def from_file(cls, path: Path) -> KerasLayersCandidate:
        keras = import_keras()
        try:
            model = keras.saving.load_model(path, compile=False)
        except Exception as exc:
            raise RepliscopeError(f"cannot load the Keras model '{path}': {type(exc).__name__}: {exc}") from exc
        return cls(model, source=str(path))

    def units(self, x: np.ndarray) -> list[UnitInfo]:
        batch = int(x.shape[0])
        return [
            UnitInfo(
                name,
                type(layer).__name__,
                (batch, *[int(d) if d is not None else -1 for d in tuple(layer.output.shape)[1:]]),
            )
            for name, layer in self._layers.items()
        ]

    def _names(self) -> list[str]:
        return list(self._layers)

    def describe(self) -> dict[str, str]:
        return {"candidate": self.name, "model": str(self.model.name), "source": self.source}

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        return to_reference_layout(self.keras.ops.convert_to_numpy(self._run_nodes(path, inputs)[-1][1]))

    def sublayer_outputs(self, path: str, inputs: Sequence[np.ndarray]) -> list[tuple[str, np.ndarray]]:
        """The golden unit ending at ``path`` layer by layer: ("name (Class)", output in the reference layout),
        the layers returning one tensor."""
        return [
            (label, to_reference_layout(self.keras.ops.convert_to_numpy(out)))
            for label, out in self._run_nodes(path, inputs)
            if not isinstance(out, (list, tuple, dict))
        ]

    def _run_nodes(self, path: str, inputs: Sequence[np.ndarray]) -> list[tuple[str, Any]]:
        nodes, external = self.chain(path)
        check_unit_inputs(
            f"Keras unit '{path}' ({'+'.join(n.operation.name for n in nodes)})", len(external), len(inputs)
        )
        values: dict[int, Any] = {
            id(t): to_keras_layout(np.asarray(a, dtype=np.float32)) for t, a in zip(external, inputs, strict=True)
        }
        found: list[tuple[str, Any]] = []
        for node in nodes:
            args, kwargs = node.arguments.fill_in(values)
            if isinstance(node.operation, self.keras.layers.Layer):
                kwargs = {**kwargs, "training": False}
            out = node.operation(*args, **kwargs)
            for t, value in zip(node.outputs, self.keras.tree.flatten(out), strict=True):
                values[id(t)] = value
            found.append((f"{node.operation.name} ({type(node.operation).__name__})", out))
        return found

    def output(self, x: np.ndarray) -> np.ndarray | None:
        """The model's output on ``x`` (reference layout in and out)."""
        out = self.model(to_keras_layout(np.asarray(x, dtype=np.float32)), training=False)
        return to_reference_layout(self.keras.ops.convert_to_numpy(out))

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        wanted: dict[int, list[str]] = {}
        for name in paths:
            layer = self._layers.get(name)
            if layer is None:
                raise RepliscopeError(f"the Keras model '{self.model.name}' has no layer '{name}'")
            wanted.setdefault(id(layer._inbound_nodes[0].outputs[0]), []).append(name)
        yield from stream_outputs(self.keras, self.model, x, wanted)


class KerasNestedCandidate(NamedCandidate):
    """Any Keras model, Keras 3 or tf_keras (Keras 2), with its layers AND their sub-layers as units, each named by
    its path of layer names from the model: ``backbone/conv_0/bn`` is the layer ``bn`` of the layer ``conv_0`` of
    the sub-model ``backbone`` (a nested model, or a custom layer whose sub-layers are tracked attributes).

    * golden (``run_layer``): the unit's layer called alone on the reference inputs (NCHW -> NHWC for 4-D);
    * carried (``forward_layers``): the whole model called once with each requested layer's ``call`` wrapped to
      copy its output (restored afterwards); a requested layer the forward never calls (a sub-layer of a layer
      revived from a SavedModel without its class, which runs its saved graph instead) is said in the notes.

    Outputs are the layer's own (NHWC for a 4-D image tensor: ``output_layout = "NHWC"``). ``keras``: the module the
    model belongs to (``keras`` or ``tf_keras``); ``flavour`` names it in the record."""

    name: ClassVar[str] = "keras"
    layout: ClassVar[str] = "NHWC"
    output_layout: ClassVar[str] = "NHWC"
    spans_gaps: ClassVar[bool] = False

    def __init__(self, model: Any, keras: Any, source: str = "", flavour: str = "keras") -> None:
        super().__init__()
        self.model, self.keras, self.source, self.flavour = model, keras, source, flavour
        self.name = flavour  # type: ignore[misc]
        self._paths: dict[str, Any] = {}
        self._walk(model, "")

    def _children(self, layer: Any) -> list[Any]:
        if hasattr(layer, "layers") and isinstance(layer.layers, list):
            return list(layer.layers)
        return list(layer._flatten_layers(include_self=False, recursive=False))

    def _walk(self, layer: Any, prefix: str) -> None:
        for child in self._children(layer):
            if isinstance(child, self.keras.layers.InputLayer):
                continue
            path = f"{prefix}{child.name}"
            if path not in self._paths:
                self._paths[path] = child
                self._walk(child, path + "/")

    def layer(self, path: str) -> Any:
        """The layer at ``path``; RepliscopeError naming the layers at the level where the path leaves the model."""
        found = self._paths.get(path)
        if found is not None:
            return found
        parts = path.split("/")
        prefix = ""
        for part in parts:
            here = [p[len(prefix) :] for p in self._paths if p.startswith(prefix) and "/" not in p[len(prefix) :]]
            if f"{prefix}{part}" not in self._paths:
                close = difflib.get_close_matches(part, here, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise RepliscopeError(
                    f"the {self.flavour} model '{self.model.name}' has no layer '{part}' "
                    f"{'in ' + prefix.rstrip('/') if prefix else 'at the top'}{hint}; there: {', '.join(here[:20])}"
                )
            prefix = f"{prefix}{part}/"
        raise RepliscopeError(f"the {self.flavour} model '{self.model.name}' has no layer '{path}'")

    def units(self, x: np.ndarray) -> list[UnitInfo]:
        """Every layer path, in the order the forward on ``x`` calls them (never-called ones last), with the
        output shape of its first call."""
        shapes: dict[str, tuple[int, ...]] = {}
        with self._hooked(list(self._paths), lambda path, out: shapes.setdefault(path, tuple(np.shape(out)))):
            self._call_model(x)
        order = [*shapes, *[p for p in self._paths if p not in shapes]]
        self._units = [UnitInfo(p, type(self._paths[p]).__name__, shapes.get(p, ())) for p in order]
        return self._units

    def _names(self) -> list[str]:
        return list(self._paths)

    def describe(self) -> dict[str, str]:
        return {
            "candidate": self.flavour,
            "model": str(self.model.name),
            "source": self.source,
            self.flavour: str(getattr(self.keras, "__version__", "")),
        }

    def _call_model(self, x: np.ndarray) -> Any:
        return self.model(to_keras_layout(np.asarray(x, dtype=np.float32)), training=False)

    def _hooked(self, paths: Sequence[str], record: Any) -> Any:
        """A context manager wrapping ``call`` of each layer of ``paths`` to ``record(path, output)``."""
        import contextlib

        @contextlib.contextmanager
        def manage() -> Iterator[None]:
            wrapped: list[Any] = []
            try:
                for path in paths:
                    target = self.layer(path)
                    if "call" in vars(target):  # already wrapped (a layer reached by two paths)
                        continue
                    original = target.call

                    def call(*args: Any, _original: Any = original, _path: str = path, **kwargs: Any) -> Any:
                        out = _original(*args, **kwargs)
                        if not isinstance(out, (list, tuple, dict)):
                            record(_path, out)
                        return out

                    target.call = call
                    wrapped.append(target)
                yield
            finally:
                for target in wrapped:
                    del target.call

        return manage()

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        layer = self.layer(path)
        args = [to_keras_layout(np.asarray(a, dtype=np.float32)) for a in inputs]
        try:
            out = layer(args[0] if len(args) == 1 else args, training=False)
        except Exception as exc:  # the unit cannot take these inputs: a wrong pairing, said in one line
            shapes = ", ".join("x".join(map(str, a.shape)) for a in args)
            first = str(exc).splitlines()[0][:300] if str(exc) else ""
            raise RepliscopeError(
                f"{self.flavour} unit '{path}' ({type(layer).__name__}) fails on the reference input(s) of its "
                f"layer ({shapes}, NHWC): check the pair in --mapping ({type(exc).__name__}: {first})"
            ) from None
        return np.asarray(out)

    def output(self, x: np.ndarray) -> np.ndarray | None:
        out = self._call_model(x)
        return None if isinstance(out, (list, tuple, dict)) else np.asarray(out)

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        wanted = list(dict.fromkeys(paths))
        got: dict[str, np.ndarray] = {}
        with self._hooked(wanted, lambda path, out: got.setdefault(path, np.array(out, copy=True))):
            self._call_model(x)
        never = [p for p in wanted if p not in got]
        if never:
            note = (
                f"{self.flavour} layer(s) {', '.join(never[:8])} not called by the model's forward (a layer revived "
                "from a SavedModel without its class runs its saved graph, not its sub-layers): no carried output; "
                "pair the enclosing layer, or give a callable FILE.py:NAME that builds the model"
            )
            if note not in self.notes:
                self.notes.append(note)
        for path in [p for p in got if p in set(wanted)]:
            yield path, got.pop(path)


def _template_regex(template: str) -> re.Pattern[str]:
    """A Keras name template (``block{i}_dw_bn``) -> a regex matching the names it can produce."""
    parts = re.split(r"\{\w+\}", template)
    return re.compile(".+?".join(re.escape(p) for p in parts))


def _sidecar_mapping(keras_file: Path) -> Path:
    for candidate in (keras_file.with_suffix(".mapping.yaml"), keras_file.parent / "mapping.yaml"):
        if candidate.is_file():
            return candidate
    raise RepliscopeError(
        f"no mapping for '{keras_file}': expected '{keras_file.with_suffix('.mapping.yaml')}' "
        f"or '{keras_file.parent / 'mapping.yaml'}' (repliscope convert writes the former)"
    )


CANDIDATES.add("keras", KerasCandidate)

"""Layer-level diff of two runtimes on ONE ONNX graph: onnxruntime is the golden reference, OpenCV DNN the
candidate, node by node.

Units are the graph's nodes with a floating-point output, named ``<graph>/<first output tensor>`` (``rnet/p_re_lu_3
/add:0_pooling0``; ``<graph>`` is the net's name, e.g. ``pnet`` / ``rnet`` / ``onet`` of an MTCNN cascade, or
``model``). The reference side is :class:`~repliscope.diff.layers.onnx_graph_candidate.OnnxGraphCandidate` (every node
output exposed in one onnxruntime session; a node cut out with the non-float nodes it depends on).

* golden: each node (plus the integer / shape nodes feeding it) is cut out as a small ONNX model, written to a
  file, read by OpenCV and fed onnxruntime's values of its inputs (``net.setInput(value, name)`` per input);
  a node OpenCV cannot run alone is listed (``uncompared``) with OpenCV's message.
* carried: the whole graph with every unit's tensor made a GRAPH OUTPUT, run once by OpenCV on the same input
  (``net.forward(names)``). OpenCV 5's new engine returns only graph outputs from ``forward(names)`` (the names
  must be exactly the graph's outputs); its classic engine also answers layer names (``onnx_node!<node>``)
  of layers it did not fuse. Exposing every tensor works on both; a tensor OpenCV fused away (a MatMul folded
  into the next Add) comes back empty and is listed. Exposing outputs may keep OpenCV from fusing layers it
  fuses in the plain graph, so the plain graph's outputs are compared too (``output``).

OpenCV's engine is chosen explicitly (``new`` | ``classic``) and always read from a FILE: in OpenCV 5.0
``readNetFromONNX(buffer, ENGINE_CLASSIC)`` silently builds the new engine.

Tolerance (:mod:`repliscope.diff.tolerance`): ``k * eps(float32) * sqrt(n) * max|ref|`` per node with ``n`` the
node's reduction length (Conv ``C_in / group * kh * kw``, MatMul / Gemm the inner dimension, AveragePool the
window, GlobalAveragePool / Reduce* the reduced count, Softmax the axis length, Resize the interpolation taps
(linear 2, cubic 4 per resized axis: bilinear 4); 1 for element-wise ops and MaxPool, which are exact),
accumulated in quadrature in carried mode.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from repliscope.diff.layers.driver import assemble
from repliscope.diff.layers.layer_result import LayerDiffResult, LayerRow, Mode, NotCompared
from repliscope.diff.layers.onnx_graph_candidate import OnnxGraphCandidate
from repliscope.diff.tolerance import FORMULA, ErrorStats, TolerancePolicy, accumulate, compare_arrays, output_scale
from repliscope.errors import RepliscopeError
from repliscope.runtimes.errors import ModelLoadError

ENGINES = ("new", "classic")
_ATTRS = ("auto_pad", "kernel_shape", "strides", "pads", "dilations", "group", "axis", "mode", "ceil_mode")


@dataclass(frozen=True)
class GraphInput:
    """One ONNX graph to diff: ``name`` prefixes its units, ``path`` the .onnx file, ``x`` its input batch in the
    graph's own layout and dtype (e.g. float32 NHWC (N, 24, 24, 3) for MTCNN's R-Net)."""

    name: str
    path: Path
    x: np.ndarray
    origin: str = ""
    """Where ``x`` comes from (shown in the notes)."""


@dataclass
class _Unit:
    graph: str
    tensor: str
    node: onnx.NodeProto
    ref: np.ndarray
    reduction: int

    @property
    def path(self) -> str:
        return f"{self.graph}/{self.tensor}"


def describe_node(node: onnx.NodeProto) -> str:
    """``node 'NAME' (auto_pad=SAME_UPPER, kernel_shape=[3, 3], strides=[2, 2])``: the attributes that set an op's
    arithmetic."""
    attrs = []
    for a in node.attribute:
        if a.name in _ATTRS:
            value = onnx.helper.get_attribute_value(a)
            text = (
                value.decode()
                if isinstance(value, bytes)
                else str(list(value))
                if isinstance(value, Sequence)
                else str(value)
            )
            attrs.append(f"{a.name}={text}")
    return f"node '{node.name or node.output[0]}'" + (f" ({', '.join(attrs)})" if attrs else "")


def reduction_length(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]], out_shape: tuple[int, ...]) -> int:
    """Products / terms summed per output element of ``node`` (see the module docstring); ``shapes``: the
    shapes of its inputs (activations and initializers) by tensor name."""

    def shape(i: int) -> tuple[int, ...]:
        return shapes.get(node.input[i], ()) if len(node.input) > i else ()

    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    op = node.op_type
    if op == "Conv" and len(shape(1)) >= 3:
        return int(np.prod(shape(1)[1:]))
    if op == "ConvTranspose" and len(shape(1)) >= 3:
        return int(shape(1)[0] // int(attrs.get("group", 1)) * np.prod(shape(1)[2:]))
    if op == "MatMul" and shape(0):
        return int(shape(0)[-1])
    if op == "Gemm" and len(shape(0)) == 2:
        return int(shape(0)[0] if attrs.get("transA", 0) else shape(0)[1])
    if op in ("AveragePool", "LpPool") and "kernel_shape" in attrs:
        return int(np.prod(attrs["kernel_shape"]))
    if op in ("GlobalAveragePool", "ReduceMean", "ReduceSum", "ReduceL2", "ReduceSumSquare") and shape(0):
        size = int(np.prod(out_shape)) if out_shape else 1
        return max(int(np.prod(shape(0))) // max(size, 1), 1)
    if op in ("Softmax", "LogSoftmax") and shape(0):
        return int(shape(0)[int(attrs.get("axis", -1))])
    if op in ("Resize", "Upsample") and shape(0) and out_shape:
        mode = attrs.get("mode", b"nearest")
        taps = {b"linear": 2, b"cubic": 4}.get(mode if isinstance(mode, bytes) else str(mode).encode(), 1)
        resized = sum(1 for a, b in zip(shape(0), out_shape, strict=False) if a != b)
        return int(taps**resized)
    return 1


class OpenCVGraph:
    """OpenCV DNN (CPU, ``DNN_BACKEND_OPENCV``) on ONNX models written to ``workdir``, with the ``engine`` asked
    for (``new`` | ``classic``; OpenCV 4.x has only ``classic``)."""

    def __init__(self, engine: str, threads: int, workdir: Path) -> None:
        import cv2

        from repliscope.backends.opencv_dnn.runner import read_onnx

        if engine not in ENGINES:
            raise RepliscopeError(f"unknown OpenCV engine '{engine}' (allowed: {', '.join(ENGINES)})")
        if engine == "new" and not hasattr(cv2.dnn, "ENGINE_NEW"):
            raise RepliscopeError(f"OpenCV {cv2.__version__} has only the classic engine: give --opencv-engine classic")
        self.cv2, self.engine, self.threads, self.workdir = cv2, engine, threads, workdir
        self.read = read_onnx
        self._count = 0

    def describe(self) -> dict[str, str]:
        return {
            "candidate": "opencv_dnn",
            "opencv": self.cv2.__version__,
            "engine": self.engine,
            "backend": "DNN_BACKEND_OPENCV",
        }

    def run(
        self,
        model: onnx.ModelProto,
        feeds: dict[str, np.ndarray],
        outputs: list[str],
        layer: dict[str, str] | None = None,
    ) -> list[np.ndarray | None]:
        """``model`` read by OpenCV, ``feeds`` set by input name, ``forward(names)``; copies of the outputs.
        ``layer``: output -> the OpenCV LAYER name to fetch it by (classic engine: ``onnx_node!<node name>``);
        an output whose layer the net does not have (fused / renamed by the importer) is None."""
        cv2 = self.cv2
        self._count += 1
        path = self.workdir / f"unit{self._count}.onnx"
        onnx.save(model, str(path))
        if cv2.getNumThreads() != self.threads:
            cv2.setNumThreads(self.threads)
        try:
            net = self.read(
                path,
                None
                if not hasattr(cv2.dnn, "ENGINE_NEW")
                else cv2.dnn.ENGINE_NEW
                if self.engine == "new"
                else cv2.dnn.ENGINE_CLASSIC,
            )
            net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
            for name, value in feeds.items():
                net.setInput(np.ascontiguousarray(value), name)
            known = set(net.getLayerNames()) if layer else set()
            names = [layer[o] if layer else o for o in outputs]
            present = [n for n in names if not layer or n in known]
            outs = dict(zip(present, net.forward(present), strict=True))
        except (cv2.error, ModelLoadError) as exc:
            text = " ".join(str(exc).split())
            text = text[text.find("error: (") + 7 :] if "error: (" in text else text
            raise RepliscopeError(f"OpenCV DNN ({self.engine} engine): {text[:300]}") from None
        finally:
            path.unlink(missing_ok=True)
        return [np.array(outs[n], copy=True) if n in outs else None for n in names]


def diff_runtime_graphs(
    graphs: Sequence[GraphInput],
    *,
    engine: str = "new",
    modes: Sequence[Mode] = ("golden", "carried"),
    tolerance: TolerancePolicy | None = None,
    threads: int = 2,
    samples: Sequence[str] = (),
) -> LayerDiffResult:
    """onnxruntime (reference) against OpenCV DNN (candidate) node by node on each graph of ``graphs``, in
    order; one :class:`LayerDiffResult` over all their units (``first_divergent`` is the first in that order)."""
    unknown = [m for m in modes if m not in ("golden", "carried")]
    if unknown or not modes:
        raise RepliscopeError(f"unknown diff mode(s) {unknown or list(modes)!r} (allowed: golden, carried)")
    policy = tolerance or TolerancePolicy()
    start = time.perf_counter()
    rows: list[LayerRow] = []
    uncompared: list[NotCompared] = []
    notes: list[str] = []
    outputs: list[tuple[str, ErrorStats]] = []
    with tempfile.TemporaryDirectory(prefix="repliscope-rtdiff-") as tmp:
        cand = OpenCVGraph(engine, threads, Path(tmp))
        for graph in graphs:
            out = _diff_graph(graph, cand, modes, policy, threads, rows, uncompared)
            outputs.extend(out)
            if graph.origin:
                notes.append(f"{graph.name}: input {graph.x.dtype} {tuple(graph.x.shape)} {graph.origin}")
    if not rows:
        reason = uncompared[0].reason if uncompared else "the graphs have no node with a float output"
        raise RepliscopeError(f"no node could be compared on OpenCV DNN ({engine} engine): {reason}")
    notes += [
        f"plain graph output {name}: max |err| {s.max_abs:.3g}, tolerance {s.tolerance:.3g} "
        f"({'pass' if s.passed else 'FAIL'})"
        for name, s in outputs
    ]
    worst = max(outputs, key=lambda o: o[1].ratio, default=None)
    first_graph = graphs[0] if graphs else None
    result = assemble(
        rows,
        modes,
        reference={
            "framework": "onnxruntime",
            "onnxruntime": _ort_version(),
            "graphs": ", ".join(f"{g.name}={g.path}" for g in graphs),
        },
        candidate=cand.describe(),
        input_shape=list(first_graph.x.shape) if first_graph else [],
        input_dtype=str(first_graph.x.dtype) if first_graph else "",
        samples=list(samples),
        tolerance=policy,
        formula=FORMULA + " (n: the node's reduction length; MaxPool and element-wise ops n = 1)",
        reference_layers=len(rows) + len(uncompared),
        seconds=time.perf_counter() - start,
        notes=notes,
        uncompared=uncompared,
        output=worst[1] if worst else None,
        output_note="" if worst else "no graph output compared",
    )
    result.notes[:0] = [
        f"{mode} mode compared no node: OpenCV ran none of them (the reasons are in 'not compared' and the rows' notes)"
        for mode in modes
        if not result.summary[mode].compared
    ]
    return result


def _ort_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)


def _diff_graph(
    graph: GraphInput,
    cand: OpenCVGraph,
    modes: Sequence[Mode],
    policy: TolerancePolicy,
    threads: int,
    rows: list[LayerRow],
    uncompared: list[NotCompared],
) -> list[tuple[str, ErrorStats]]:
    """Append ``graph``'s rows (and uncompared units) in graph order; return its plain outputs' comparisons."""
    ref = OnnxGraphCandidate(graph.path, threads=threads)
    ref.layout = "NCHW"  # type: ignore[misc]  # fed in the graph's own layout: no transposition
    x = np.asarray(graph.x, dtype=ref.input_dtype)
    infos = ref.units(x)
    names = [u.name for u in infos]
    ref.set_mapped(names)
    cuts = {name: ref.unit_model(name) for name in names} if "golden" in modes else {}
    extra = [t for _, external in cuts.values() for t in external if t != ref.input_name]
    values = ref.tensor_values(x, [*names, *extra])  # a unit may read a node's 2nd output (Split, unstack)
    values[ref.input_name] = x
    model = ref.model
    inits = {i.name: tuple(int(d) for d in i.dims) for i in model.graph.initializer}
    shapes = {**inits, **{k: tuple(v.shape) for k, v in values.items()}}
    units = [
        _Unit(
            graph.name,
            u.name,
            ref.node(u.name),
            values[u.name],
            reduction_length(ref.node(u.name), shapes, tuple(values[u.name].shape)),
        )
        for u in infos
    ]
    golden = _golden(cand, units, cuts, values, policy) if "golden" in modes else {}
    carried = _carried(ref, cand, units, x, policy) if "carried" in modes else {}
    for unit in units:
        g, c = golden.get(unit.tensor), carried.get(unit.tensor)
        reasons = [s for s in (g, c) if isinstance(s, str)]
        if len(reasons) == len(modes):
            uncompared.append(
                NotCompared(
                    path=unit.path,
                    kind=unit.node.op_type,
                    source=describe_node(unit.node),
                    reason="; ".join(dict.fromkeys(reasons)),
                )
            )
            continue
        rows.append(
            LayerRow(
                index=len(rows),
                path=unit.path,
                covers=[unit.path],
                kind=unit.node.op_type,
                source=describe_node(unit.node),
                reduction=unit.reduction,
                dtype=str(unit.ref.dtype),
                ref_shape=list(unit.ref.shape),
                ref_max_abs=output_scale(unit.ref),
                candidate_layout="graph",
                golden=g if isinstance(g, ErrorStats) else None,
                carried=c if isinstance(c, ErrorStats) else None,
                notes=[f"{m}: {s}" for m, s in (("golden", g), ("carried", c)) if isinstance(s, str)],
            )
        )
    return _plain_outputs(ref, cand, graph, x, units, policy)


def _tol(unit: _Unit, policy: TolerancePolicy) -> float:
    return policy.tolerance(unit.path, [unit.node.op_type], unit.ref.dtype, unit.reduction, output_scale(unit.ref))


def _compare(unit: _Unit, got: np.ndarray, tol: float, policy: TolerancePolicy) -> ErrorStats | str:
    if got.size == 0 and unit.ref.size:
        return "OpenCV returned no value for this tensor (fused into the next layer)"
    if got.shape != unit.ref.shape:
        if got.size != unit.ref.size:
            return f"OpenCV's output has shape {got.shape}, onnxruntime's {unit.ref.shape}"
        got = got.reshape(unit.ref.shape)
    return compare_arrays(unit.ref, got.astype(unit.ref.dtype, copy=False), tol, policy.rel_floor)


def _golden(
    cand: OpenCVGraph,
    units: list[_Unit],
    cuts: dict[str, tuple[onnx.ModelProto, list[str]]],
    values: dict[str, np.ndarray],
    policy: TolerancePolicy,
) -> dict[str, ErrorStats | str]:
    out: dict[str, ErrorStats | str] = {}
    for unit in units:
        sub, external = cuts[unit.tensor]
        missing = [t for t in external if t not in values]
        if missing:
            out[unit.tensor] = f"inputs {', '.join(missing)} have no reference value"
            continue
        try:
            (got,) = cand.run(sub, {t: values[t] for t in external}, [unit.tensor])
        except RepliscopeError as exc:
            out[unit.tensor] = f"OpenCV cannot run the node alone: {exc}"
            continue
        out[unit.tensor] = (
            _compare(unit, got, _tol(unit, policy), policy) if got is not None else "OpenCV returned nothing"
        )
    return out


def _carried(
    ref: OnnxGraphCandidate, cand: OpenCVGraph, units: list[_Unit], x: np.ndarray, policy: TolerancePolicy
) -> dict[str, ErrorStats | str]:
    """The new engine: every unit's tensor made a graph output (it fetches nothing else); the classic engine: the
    plain graph, each unit fetched by its layer name ``onnx_node!<node name>``."""
    model = ref.model
    layer: dict[str, str] | None = None
    names = [u.tensor for u in units]
    if cand.engine == "new":
        model = ref.exposed_model(u.tensor for u in units)
        names = [o.name for o in model.graph.output]  # forward(names) must name every graph output
    else:
        layer = {u.tensor: f"onnx_node!{u.node.name}" for u in units}
    how = "with every node output exposed" if layer is None else "fetching every node by its layer name"
    try:
        got = dict(zip(names, cand.run(model, {ref.input_name: x}, names, layer), strict=True))
    except RepliscopeError as exc:
        return {u.tensor: f"OpenCV cannot run the graph {how}: {exc}" for u in units}
    tolerances = accumulate([_tol(u, policy) for u in units])
    out: dict[str, ErrorStats | str] = {}
    for u, tol in zip(units, tolerances, strict=True):
        value = got[u.tensor]
        out[u.tensor] = (
            _compare(u, value, tol, policy)
            if value is not None
            else (f"the classic engine has no layer '{(layer or {}).get(u.tensor)}' (fused into another layer)")
        )
    return out


def _plain_outputs(
    ref: OnnxGraphCandidate,
    cand: OpenCVGraph,
    graph: GraphInput,
    x: np.ndarray,
    units: list[_Unit],
    policy: TolerancePolicy,
) -> list[tuple[str, ErrorStats]]:
    """The unmodified graph's outputs on both runtimes, judged against the carried tolerance over all its
    units."""
    names = [o.name for o in ref.model.graph.output]
    produced = {u.tensor for u in units}
    reference = dict(ref.forward_layers(x, [n for n in names if n in produced]))
    try:
        got = dict(zip(names, cand.run(ref.model, {ref.input_name: x}, names), strict=True))
    except RepliscopeError:
        return []
    total = math.sqrt(sum(_tol(u, policy) ** 2 for u in units))
    out = []
    for name in names:
        if name not in reference:
            continue
        r, c = reference[name], got[name]
        if c is None:
            continue
        if c.shape != r.shape and c.size == r.size:
            c = c.reshape(r.shape)
        if c.shape == r.shape:
            out.append(
                (f"{graph.name}/{name}", compare_arrays(r, c.astype(r.dtype, copy=False), total, policy.rel_floor))
            )
    return out


def manifest_graphs(
    manifest: str | Path, dataset: Any, batch: int, *, threads: int = 2, cache_dir: Path | None = None
) -> tuple[list[GraphInput], list[str]]:
    """The ONNX graph(s) a manifest runs on the ONNX runtimes, each with a batch of REAL inputs, and the sample ids.

    * ``mtcnn_cascade``: P-Net, R-Net and O-Net (units ``pnet/...``, ``rnet/...``, ``onet/...``), each fed what
      repliscope's cascade feeds it on onnxruntime for the first ``batch`` images (P-Net: the first pyramid level
      of the first image; R-Net / O-Net: every crop of those images);
    * any other source (``onnx``, a torch export, a ``tflite`` / ``tf_frozen_graph`` through its recorded tf2onnx
      conversion): the ONNX file the runtimes run (unit prefix ``model``), fed the manifest's pre-processed first
      ``batch`` samples (the first ``b`` when the graph's batch is fixed at ``b``)."""
    from repliscope.diff.task_level import first_batch, iter_batches
    from repliscope.evaluation.run import RunSettings, prepare
    from repliscope.paths import default_cache_dir
    from repliscope.runtimes._common import onnx_fixed_batch, onnx_source

    prepared = prepare(manifest, RunSettings(runtime="onnxruntime", threads=threads, batch_size=1, cache_dir=cache_dir))
    artifact = prepared.artifact
    shape = tuple(artifact.input_shape[1:])
    if artifact.format == "mtcnn_cascade":
        from repliscope.runtimes.mtcnn import cascade_net_inputs, net_files

        ids, images = [], []
        for smp, x in iter_batches(prepared.pipeline, dataset.samples, 1, shape, []):
            ids.append(smp[0].id)
            images.append(x[0])
            if len(ids) == batch:
                break
        if not images:
            raise RepliscopeError(f"no sample of '{dataset.name}' could be pre-processed")
        files = net_files(artifact)
        feeds = cascade_net_inputs(files, images, threads)
        what = {
            "pnet": f"the first pyramid level of {ids[0]}",
            "rnet": f"every crop of {len(ids)} image(s)",
            "onet": f"every crop of {len(ids)} image(s)",
        }
        graphs = [
            GraphInput(name, files[name], feeds[name], origin=f"as the cascade feeds it on onnxruntime ({what[name]})")
            for name in ("pnet", "rnet", "onet")
            if name in feeds
        ]
        return graphs, ids
    path = onnx_source(artifact, cache_dir or default_cache_dir(), {})
    fixed = onnx_fixed_batch(path)
    ids, x = first_batch(prepared.pipeline, dataset, fixed or batch, shape)
    origin = (
        f"the manifest's pre-processing of {len(ids)} sample(s)"
        + (f" (the graph's batch is fixed at {fixed})" if fixed else "")
        + (f", ONNX converted from {artifact.format} ({path.name})" if artifact.format != "onnx" else "")
    )
    return [GraphInput("model", path, x, origin=origin)], ids

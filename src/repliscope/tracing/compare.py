"""Per-layer time of two traces of the same model aligned by layer: "layer X is 3.1× slower on B".

Both sides are reduced to per-layer p50 self times (:func:`repliscope.tracing.summary.layer_times`); traces
with the same layer keys align directly. Otherwise the layer diff's mapping is used: ONNX-based layers are keyed
by the torch module that produced their nodes (``diff.onnx_units.partition`` over ``pkg.torch.onnx.name_scopes``),
and a fused layer covers several finer layers (ONNX Runtime's Conv+BatchNorm+ReLU6 is keyed by the ReLU6 call and
covers the conv and batch norm modules of torch, or OpenCV DNN's separate Conv and Clip layers), assigned with
``diff.onnx_units.assign_covers`` in the finer side's execution order (torch is the finer side against an ONNX
runtime; else the side with more layers); the finer side's time for a key is the sum of the layers it covers.
"""

from __future__ import annotations

from dataclasses import dataclass

from repliscope.tracing.summary import LayerTimes

_ONNX_BASED = ("onnxruntime", "opencv_dnn")


@dataclass(frozen=True)
class LayerComparison:
    """One aligned layer: ``key`` (B's key, or A's when B is torch), the torch modules it ``covers``, p50 ms."""

    key: str
    covers: tuple[str, ...]
    a_ms: float
    b_ms: float

    @property
    def ratio(self) -> float:
        """B time / A time (inf when A is 0)."""
        return self.b_ms / self.a_ms if self.a_ms > 0 else float("inf")

    @property
    def label(self) -> str:
        """``key``, or ``first covered module … key`` when the key covers more than one module (the first one
        under the key's parent module, e.g. ``_blocks.3._depthwise_conv … _blocks.3._swish#2``)."""
        if len(self.covers) <= 1:
            return self.key
        parent = self.key.split("#", 1)[0].rpartition(".")[0]
        under = [c for c in self.covers if not parent or c.startswith(parent + ".")] or list(self.covers)
        head = min(under, key=lambda c: c.count("."))
        return self.key if head == self.key else f"{head} … {self.key}"

    def sentence(self, a: str, b: str) -> str:
        r = self.ratio
        if r >= 1:
            return f"layer {self.label} is {r:.1f}× slower on {b} ({self.b_ms:.3f} ms vs {self.a_ms:.3f} ms)"
        return f"layer {self.label} is {1 / r:.1f}× faster on {b} ({self.b_ms:.3f} ms vs {self.a_ms:.3f} ms)"


@dataclass(frozen=True)
class TraceComparison:
    a_source: str
    b_source: str
    layers: list[LayerComparison]
    """In execution order."""
    only_a: list[str]
    only_b: list[str]
    a_model_ms: float
    b_model_ms: float
    mapping: str
    """``by key``, or which side's layers were grouped into the other's."""

    def largest(self, n: int) -> list[LayerComparison]:
        """The ``n`` layers with the largest absolute time difference."""
        return sorted(self.layers, key=lambda c: -abs(c.b_ms - c.a_ms))[:n]


def compare_layers(a: LayerTimes, b: LayerTimes) -> TraceComparison:
    """Align ``a`` and ``b`` (see the module doc)."""
    from statistics import median

    a_model = median(a.model_ns) / 1e6 if a.model_ns else 0.0
    b_model = median(b.model_ns) / 1e6 if b.model_ns else 0.0
    if set(a.self_ns) == set(b.self_ns):
        layers = [LayerComparison(k, (k,), a.p50_ms(k), b.p50_ms(k)) for k in a.order()]
        return TraceComparison(a.source, b.source, layers, [], [], a_model, b_model, "by key")
    one_torch = (a.source == "torch") != (b.source == "torch")
    a_finer = a.source == "torch" if one_torch else len(a.self_ns) >= len(b.self_ns)
    fine, coarse = (a, b) if a_finer else (b, a)
    rows, only_fine, only_coarse = _by_covers(fine, coarse)
    if a_finer:
        layers = [LayerComparison(k, c, f, o) for k, c, f, o in rows]
        only_a, only_b = only_fine, only_coarse
    else:
        layers = [LayerComparison(k, c, o, f) for k, c, f, o in rows]
        only_a, only_b = only_coarse, only_fine
    return TraceComparison(
        a.source,
        b.source,
        layers,
        only_a,
        only_b,
        a_model,
        b_model,
        f"{fine.source} layers grouped into {coarse.source} layers (assign_covers)",
    )


def _by_covers(
    fine: LayerTimes, coarse: LayerTimes
) -> tuple[list[tuple[str, tuple[str, ...], float, float]], list[str], list[str]]:
    """Rows (coarse key, the fine layers it covers, fine ms summed, coarse ms), fine-only, coarse-only keys."""
    from repliscope.diff.base import LayerInfo
    from repliscope.diff.layers.onnx_units import assign_covers

    order = fine.order()
    fine_keys = set(order)
    keys = [k for k in coarse.order() if k in fine_keys]
    layers = [LayerInfo(path=k, kind=fine.op_type[k], source="", reduction=1) for k in order]
    covers = assign_covers(layers, keys)
    covered = {p for group in covers.values() for p in group}
    rows = [
        (key, tuple(group), sum(fine.p50_ms(p) for p in group), coarse.p50_ms(key)) for key, group in covers.items()
    ]
    return rows, [k for k in order if k not in covered], [k for k in coarse.order() if k not in covers]

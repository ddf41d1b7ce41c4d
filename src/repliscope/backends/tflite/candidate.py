"""A ``.tflite`` model as a layer-diff candidate (carried mode only), run by TensorFlow Lite's interpreter.

Units are the model's operators in execution order, named by their (first) output tensor name, e.g.
``efficientnet_lite0_1/stem_relu_1/Relu6;...`` for a ``CONV_2D`` the converter fused with its batch norm and
ReLU6 (the auto mapping pairs it with the reference's ReLU6 and lists the conv and batch norm it covers).

Intermediate tensors are read after ONE ``invoke()`` with ``experimental_preserve_all_tensors=True`` (the
interpreter otherwise reuses their memory). The built-in kernels run WITHOUT the default XNNPACK delegate,
whose fused subgraphs hide their intermediate tensors: the numbers are TFLite's reference kernels', which can
differ from a deployed XNNPACK run by rounding (the final output still shows that: compare it with the
``tflite`` column of ``--runtimes`` when a runtime exists).

Golden mode is not possible: the interpreter runs the whole graph and cannot execute one operator on given
inputs (the result says so). Layout: the model's own (a Keras/TensorFlow export is NHWC; 4-D inputs are
transposed NCHW -> NHWC and ``output_layout`` is ``"NHWC"``). The batch axis is resized to the batch given.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.diff.base import CANDIDATES
from repliscope.diff.layers.mapping import NamedCandidate, UnitInfo
from repliscope.errors import RepliscopeError

GOLDEN_LIMIT = (
    "the TFLite interpreter runs the whole graph; it cannot execute one operator on given inputs, "
    "so only carried mode (the candidate's own forward) is compared"
)


def input_layout(shape: Sequence[int]) -> str:
    """``"NHWC"`` for a 4-D image input whose last axis is the channel axis (1, 3 or 4 channels and a larger
    spatial axis 1), else ``"NCHW"``."""
    if len(shape) == 4 and shape[3] in (1, 3, 4) and shape[1] not in (1, 3, 4):
        return "NHWC"
    return "NCHW"


class TfliteCandidate(NamedCandidate):
    """A TFLite flatbuffer with one float input."""

    name = "tflite"

    def __init__(self, path: str | Path, threads: int = 2) -> None:
        super().__init__()
        self.path = Path(path)
        if not self.path.is_file():
            raise RepliscopeError(f"TFLite candidate '{path}': no such file")
        self.threads = threads
        self.mode_limits = {"golden": GOLDEN_LIMIT}
        self._interp: Any = None
        self._batch = -1
        self._units: list[UnitInfo] = []
        self._tensor_of: dict[str, int] = {}
        self._input: dict[str, Any] = {}
        self.layout = "NCHW"  # type: ignore[misc]
        self._open(1)

    @classmethod
    def from_path(cls, path: str | Path, reference_module: Any) -> TfliteCandidate:
        return cls(path)

    def _open(self, batch: int) -> None:
        """The interpreter on the file's BYTES (``model_content``): TensorFlow verifies a buffer before building
        it, while ``model_path`` skips the verifier and a truncated file segfaults (:mod:`repliscope.runtimes.
        tflite_file`)."""
        import tensorflow as tf

        from repliscope.backends.tflite.loader import read_tflite

        content = read_tflite(self.path)
        try:
            with warnings.catch_warnings():  # the deprecation notice (tensorflow 2.21 still ships the interpreter)
                warnings.filterwarnings(
                    "ignore", message=r"(?s).*tf\.lite\.Interpreter is deprecated", category=UserWarning
                )
                warnings.filterwarnings(
                    "ignore", message=r"(?s).*experimental_preserve_all_tensors", category=UserWarning
                )
                interp = tf.lite.Interpreter(
                    model_content=content,
                    num_threads=self.threads,
                    experimental_preserve_all_tensors=True,
                    experimental_op_resolver_type=tf.lite.experimental.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                )
        except (ValueError, RuntimeError) as exc:
            raise RepliscopeError(f"TFLite candidate '{self.path}' cannot be loaded: {exc}") from exc
        inputs = interp.get_input_details()
        if len(inputs) != 1:
            raise RepliscopeError(
                f"TFLite candidate '{self.path}': the layer diff needs one input, the model has {len(inputs)}"
            )
        self._input = inputs[0]
        shape = list(self._input["shape"])
        shape[0] = batch
        interp.resize_tensor_input(self._input["index"], shape)
        interp.allocate_tensors()
        self._interp, self._batch = interp, batch
        self.layout = input_layout(shape)  # type: ignore[misc]
        self.output_layout = "NHWC" if self.layout == "NHWC" else "reference"  # type: ignore[misc]
        tensors = {t["index"]: t for t in interp.get_tensor_details()}
        self._units, self._tensor_of = [], {}
        for op in interp._get_ops_details():
            outs = [int(o) for o in op["outputs"] if int(o) >= 0]
            if not outs:
                continue
            info = tensors[outs[0]]
            name = str(info["name"])
            self._tensor_of[name] = outs[0]
            self._units.append(UnitInfo(name, str(op["op_name"]), tuple(int(d) for d in info["shape"])))

    def units(self, x: np.ndarray) -> list[UnitInfo]:
        if self._batch != x.shape[0]:
            self._open(int(x.shape[0]))
        return list(self._units)

    def describe(self) -> dict[str, str]:
        import tensorflow as tf

        return {
            "candidate": self.name,
            "model": str(self.path),
            "tensorflow": tf.__version__,
            "kernels": "TFLite builtin (no XNNPACK delegate)",
            "units": str(len(self._units)),
        }

    def run_layer(self, path: str, inputs: Sequence[np.ndarray]) -> np.ndarray:
        raise RepliscopeError(f"'{path}': golden mode is not possible for a TFLite candidate: {GOLDEN_LIMIT}")

    def output(self, x: np.ndarray) -> np.ndarray | None:
        """The model's (first) output on ``x``, in its own layout (e.g. float32 logits (N, C))."""
        if self._batch != x.shape[0]:
            self._open(int(x.shape[0]))
        self._interp.set_tensor(self._input["index"], self.to_candidate_layout(np.asarray(x, self._input["dtype"])))
        self._interp.invoke()
        return np.array(self._interp.get_tensor(self._interp.get_output_details()[0]["index"]), copy=True)

    def forward_layers(self, x: np.ndarray, paths: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
        if self._batch != x.shape[0]:
            self._open(int(x.shape[0]))
        wanted = list(paths)
        unknown = [p for p in wanted if p not in self._tensor_of]
        if unknown:
            raise RepliscopeError(f"TFLite candidate: no operator output named {', '.join(unknown[:5])}")
        feed = self.to_candidate_layout(np.asarray(x, dtype=self._input["dtype"]))
        self._interp.set_tensor(self._input["index"], feed)
        self._interp.invoke()
        order = {u.name: k for k, u in enumerate(self._units)}
        for name in sorted(wanted, key=order.__getitem__):
            yield name, np.array(self._interp.get_tensor(self._tensor_of[name]), copy=True)


CANDIDATES.add("tflite", TfliteCandidate)

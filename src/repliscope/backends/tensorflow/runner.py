"""TensorFlow runner: a frozen GraphDef (``.pb``, e.g. a TF Object Detection API export) or a SavedModel.

* ``tf_frozen_graph``: the GraphDef is imported inside ``tf.compat.v1.wrap_function`` and ``prune``-d to a
  concrete function from the manifest's input tensor to its output tensors, named ``op:index`` exactly as in
  the graph (``image_tensor:0`` -> ``detection_boxes:0``, ...). No tensor is guessed.
* ``tf_saved_model``: the source file is the SavedModel's ``saved_model.pb``; the manifest's sha256 covers its
  whole folder (:func:`repliscope.manifest.checksums.saved_model_sha256`: ``variables/`` included); the folder
  holding it is loaded with ``tf.saved_model.load``. The serving signature is chosen by name: the
  one signature whose inputs contain ``inputs[0].name`` and whose outputs contain every manifest output name;
  none or several is an error listing each signature with its inputs and outputs. The ``variables/`` files are
  hashed into ``notes["variables_sha256"]``.

Threads: TensorFlow's intra/inter-op thread pools are PROCESS-GLOBAL and fixed at TensorFlow's first use
(``tf.config.threading``). The first runner sets intra-op = ``threads``, inter-op = 1; a later runner asking for
another count cannot change them. ``notes["thread_pools"]`` holds the effective intra/inter-op counts (0 = TF's
own choice, one thread per core), whether this runner set them, and ``matches_requested``.

Tracing (``--trace-level framework``): one ``tensorflow.call`` span (framework) per batch with two stages as
``layer`` spans: ``call`` (the concrete function: feed, graph, outputs as tensors) and ``to_numpy`` (outputs
copied to numpy); :mod:`repliscope.backends.tensorflow.tracing` adds TensorFlow's own profiler's kernels inside each
``call`` as layer spans.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.backends.tensorflow.loader import read_graph_def, tensor_name
from repliscope.runtimes._common import check_batch, distribution_version, single_output_scores
from repliscope.runtimes.base import ModelArtifact, Runner, import_framework
from repliscope.runtimes.errors import BatchError, ModelLoadError

TF_INSTALL = "pip install 'repliscope[keras]', i.e. tensorflow-cpu"

__all__ = ["TF_INSTALL", "TensorflowRunner", "read_graph_def", "set_threads", "tensor_name"]


def set_threads(threads: int) -> dict[str, Any]:
    """Set TensorFlow's process-global thread pools (intra-op ``threads``, inter-op 1) if TensorFlow has not
    started yet; return the effective values and whether they were set now."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        changed = True
    except RuntimeError:  # the runtime is initialised: the pools are fixed
        changed = False
    return {
        "intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
        "set_now": changed,
    }


class TensorflowRunner(Runner):
    """TensorFlow (``tensorflow`` / ``tensorflow-cpu``) on CPU, eager calls of a concrete function.

    ``infer``: batch (N, ...) of ``artifact.input_dtype`` in the model's layout (TF image models are NHWC, e.g.
    uint8 (N, 300, 300, 3) for ``image_tensor:0``) -> float32 (N, C) of the single output; ``infer_outputs`` ->
    every output by manifest name as numpy, batch first, dtype as the graph produces it (TF OD API exports give
    float32 classes and counts).
    """

    name = "tensorflow"

    def __init__(self, artifact: ModelArtifact, *, threads: int, cache_dir: Path) -> None:
        super().__init__(artifact, threads=threads, cache_dir=cache_dir)
        self._fn: Any = None
        self._call: Any = None
        self.tracer: Any = None
        """Set by :mod:`repliscope.tracing.instruments` while tracing at the framework level."""

    def framework(self) -> tuple[str, str]:
        return distribution_version(["tensorflow-cpu", "tensorflow"])

    def _load(self) -> None:
        import_framework("tensorflow", "tensorflow", TF_INSTALL)
        pools = set_threads(self.threads)
        self.notes["thread_pools"] = {
            **pools,
            "matches_requested": pools["intra_op"] == self.threads,
            "scope": "process-global, fixed at TensorFlow's first use",
        }
        if self.artifact.format == "tf_frozen_graph":
            self._load_frozen()
        elif self.artifact.format == "tf_saved_model":
            self._load_saved_model()
        else:
            raise ModelLoadError(
                f"the tensorflow runtime runs 'tf_frozen_graph' and 'tf_saved_model' sources, not "
                f"'{self.artifact.format}'"
            )

    def _load_frozen(self) -> None:
        import tensorflow as tf

        graph_def = read_graph_def(self.artifact.path)
        if not self.artifact.input_name or not self.artifact.output_names:
            raise ModelLoadError(
                "a frozen graph runs between named tensors: the manifest must name inputs[0] and "
                "every output as 'operation:index' (e.g. image_tensor:0, detection_boxes:0)"
            )
        inputs = tensor_name(self.artifact.input_name)
        outputs = [tensor_name(n) for n in self.artifact.output_names]

        def _import() -> None:
            tf.compat.v1.import_graph_def(graph_def, name="")

        wrapped = tf.compat.v1.wrap_function(_import, [])
        graph = wrapped.graph
        try:
            feeds = graph.as_graph_element(inputs)
            fetches = [graph.as_graph_element(n) for n in outputs]
        except (KeyError, ValueError) as exc:
            ops = [op.name for op in graph.get_operations() if op.type == "Placeholder"]
            raise ModelLoadError(
                f"'{self.artifact.path.name}': {exc} (the graph's placeholders: {', '.join(ops)})"
            ) from exc
        self._fn = wrapped.prune(feeds, fetches)
        self._call = lambda x: self._fn(tf.constant(x))
        self.notes["graph"] = {
            "kind": "frozen GraphDef",
            "nodes": len(graph_def.node),
            "input": inputs,
            "outputs": outputs,
            "call": "tf.compat.v1.wrap_function + prune",
        }

    def _load_saved_model(self) -> None:
        import tensorflow as tf

        folder = self.artifact.path.parent
        if self.artifact.path.name != "saved_model.pb":
            raise ModelLoadError(
                f"a tf_saved_model source names the SavedModel's saved_model.pb file, got '{self.artifact.path.name}'"
            )
        try:
            loaded = tf.saved_model.load(str(folder))
        except Exception as exc:
            raise ModelLoadError(
                f"TensorFlow cannot load the SavedModel '{folder}': {type(exc).__name__}: {exc}"
            ) from exc
        signatures = dict(loaded.signatures)
        described = {
            k: (sorted(f.structured_input_signature[1]), sorted(f.structured_outputs)) for k, f in signatures.items()
        }
        wanted_in, wanted_out = self.artifact.input_name, list(self.artifact.output_names)
        matches = [
            k
            for k, (ins, outs) in described.items()
            if wanted_in in ins and len(ins) == 1 and all(o in outs for o in wanted_out)
        ]
        if len(matches) != 1:
            listing = "; ".join(f"'{k}': inputs {ins}, outputs {outs}" for k, (ins, outs) in described.items())
            raise ModelLoadError(
                f"SavedModel '{folder}': {len(matches)} signatures take input '{wanted_in}' and "
                f"give outputs {wanted_out} (exactly one must); signatures: {listing or 'none'}"
            )
        key = matches[0]
        fn = signatures[key]
        self._fn = (loaded, fn)  # keep the loaded object alive: the signature refers to its variables
        names = wanted_out or described[key][1]
        self._call = lambda x: [fn(**{wanted_in: tf.constant(x)})[n] for n in names]
        self.notes["graph"] = {"kind": "SavedModel", "signature": key, "input": wanted_in, "outputs": names}
        self.notes["variables_sha256"] = _folder_sha256(folder / "variables")

    def _infer_outputs(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        assert self._call is not None
        check_batch(batch, self.artifact)
        if self.tracer is not None:
            return self._traced(batch)
        return self._to_numpy(self._call(np.ascontiguousarray(batch)), batch.shape[0])

    def _traced(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        span = self.tracer.span
        stage = {"op_type": "stage", "source": "tensorflow"}
        with span("tensorflow.call", "framework", batch_size=int(batch.shape[0])):
            with span("call", "framework", layer="call", **stage):
                outs = self._call(np.ascontiguousarray(batch))
            with span("to_numpy", "framework", layer="to_numpy", **stage):
                return self._to_numpy(outs, batch.shape[0])

    def _to_numpy(self, outs: Any, n: int) -> dict[str, np.ndarray]:
        names = self.notes["graph"]["outputs"]
        result: dict[str, np.ndarray] = {}
        for manifest_name, out in zip(self.artifact.output_names or names, outs, strict=True):
            arr = np.asarray(out)
            if arr.ndim == 0 or arr.shape[0] != n:
                raise BatchError(
                    f"output '{manifest_name}' has shape {arr.shape}: its first axis is not the batch ({n})"
                )
            result[manifest_name] = arr
        return result

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        return single_output_scores(self._infer_outputs(batch), batch.shape[0])


def _folder_sha256(folder: Path) -> str | None:
    """sha256 over the files of ``folder`` (relative path + content, sorted), None when it does not exist."""
    if not folder.is_dir():
        return None
    h = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(file.relative_to(folder)).encode())
        h.update(file.read_bytes())
    return h.hexdigest()

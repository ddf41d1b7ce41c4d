"""The query sample library (LoadGen's QSL): the samples a benchmark issues, held in memory before timing.

Default: every sample is read and pre-processed BEFORE timing (untimed), so a query costs only batching and
inference, as in LoadGen. ``timed_preprocess``: only the encoded bytes are held; decoding and pre-processing run
inside each query (end to end, as a user experiences it), one ``preprocess/<op>`` span per op.
Samples that fail to read or pre-process are left out of the library and listed in ``failures``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from repliscope.datasets.base import Sample, read_sample
from repliscope.errors import RepliscopeError
from repliscope.evaluation.engine import apply_op, prepare_item, shape_error
from repliscope.ops.base import Geometry, Item
from repliscope.ops.pipeline import Pipeline


def available_memory_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (None when unreadable, e.g. not Linux)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_library_fits(count: int, shape: tuple[int, ...], dtype: str, available: int | None) -> None:
    """A RepliscopeError when ``count`` pre-processed inputs of ``shape`` / ``dtype`` would take more than half of
    the ``available`` memory (bytes; None or a dynamic axis: not checked): the library is held in memory."""
    if available is None or any(d < 0 for d in shape):
        return
    need = count * int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    if need > available / 2:
        raise RepliscopeError(
            f"the query sample library would hold {count} pre-processed samples of {tuple(shape)} {dtype} = "
            f"{need / 2**30:.1f} GiB in memory, more than half of the {available / 2**30:.1f} GiB available: "
            "benchmark a subset with --limit N (LoadGen's performance sample count), or --timed-preprocess "
            "(holds the encoded files only)"
        )


@dataclass
class QuerySampleLibrary:
    """``inputs[i]``: sample i pre-processed (model input without the batch axis, e.g. float32 (3, 224, 224)),
    or ``encoded[i]``: its file bytes when ``timed_preprocess``. ``ids[i]`` names it; ``geometry[i]``: where its
    input pixels came from (:class:`Geometry`, set by the pre-processing; detection ops map boxes back with it)."""

    pipeline: Pipeline
    ids: list[str]
    expected_shape: tuple[int, ...] | None
    timed_preprocess: bool
    inputs: list[np.ndarray] = field(default_factory=list)
    encoded: list[bytes] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    geometry: list[Geometry | None] = field(default_factory=list)
    fingerprints: list[str] = field(default_factory=list)
    """Per sample of the dataset, in order: sha256 of the bytes read, or why it could not be read (the
    dataset identity of what the benchmark read)."""
    _rows: list[np.ndarray] = field(default_factory=list, repr=False)
    _row_geometry: list[list[Geometry | None]] = field(default_factory=list, repr=False)

    @classmethod
    def load(
        cls,
        pipeline: Pipeline,
        samples: Sequence[Sample],
        expected_shape: tuple[int, ...] | None,
        timed_preprocess: bool,
        dtype: str = "float32",
    ) -> QuerySampleLibrary:
        """Read every sample (and pre-process it unless ``timed_preprocess``); a failing sample is listed in
        ``failures``, and a library with no usable sample is a RepliscopeError, as is one of pre-processed
        ``dtype`` inputs too large for the memory (:func:`check_library_fits`, checked before reading)."""
        if not timed_preprocess and expected_shape is not None:
            check_library_fits(len(samples), expected_shape, dtype, available_memory_bytes())
        qsl = cls(pipeline, [], expected_shape, timed_preprocess)
        for sample in samples:
            read = read_sample(sample)
            qsl.fingerprints.append(read.fingerprint)
            x, error, geometry = prepare_item(pipeline, read, expected_shape)  # also checks timed mode's bytes
            if error is not None or x is None or read.data is None:
                qsl.failures[sample.id] = error or "no data"
                continue
            qsl.ids.append(sample.id)
            qsl.geometry.append(geometry)
            if timed_preprocess:
                qsl.encoded.append(read.data)
            else:
                qsl.inputs.append(np.ascontiguousarray(x))
        if not qsl.ids:
            raise RepliscopeError(
                f"no sample of the {len(samples)} given could be pre-processed "
                f"(first failure: {next(iter(qsl.failures.items()), ('', ''))})"
            )
        return qsl

    @classmethod
    def zeros(cls, pipeline: Pipeline, shape: tuple[int, ...], dtype: str, count: int = 8) -> QuerySampleLibrary:
        """``count`` zero inputs of ``shape`` / ``dtype``: the library of the no-op overhead measurement."""
        arrays = [np.zeros(shape, dtype=np.dtype(dtype)) for _ in range(count)]
        return cls(pipeline, [f"zeros-{i}" for i in range(count)], shape, False, inputs=arrays, geometry=[None] * count)

    def repeat(self, index: int, count: int = 8) -> QuerySampleLibrary:
        """``count`` copies of sample ``index`` (pre-processed, with its geometry): the library of the no-op
        overhead measurement of a detection model, whose post-processing needs real outputs and geometry."""
        x = self.inputs[index] if not self.timed_preprocess else self._preprocess(self.encoded[index], None)[0]
        return QuerySampleLibrary(
            self.pipeline,
            [f"{self.ids[index]}-copy{i}" for i in range(count)],
            self.expected_shape,
            False,
            inputs=[x] * count,
            geometry=[self.geometry[index]] * count,
        )

    def __len__(self) -> int:
        return len(self.ids)

    def row(self, index: int) -> np.ndarray:
        """Sample ``index``'s model input with a batch axis of 1 (1, ...), a view made once per sample (a
        single-sample query is this look-up). Not in timed mode: there the query pre-processes (:meth:`batch`)."""
        if self.timed_preprocess:
            raise RepliscopeError("a timed-preprocess library pre-processes inside each query: use batch()")
        if len(self._rows) != len(self.inputs):
            self._rows = [x[np.newaxis] for x in self.inputs]
            self._row_geometry = [[g] for g in self.geometry]
        return self._rows[index]

    def row_geometry(self, index: int) -> list[Geometry | None]:
        """``[geometry of sample index]``: the geometry argument of a single-sample query's post-processing."""
        if len(self._row_geometry) != len(self.geometry):
            self._row_geometry = [[g] for g in self.geometry]
        return self._row_geometry[index]

    def batch(self, indices: Sequence[int], tracer: Any) -> np.ndarray:
        """The model input of one query, (len(indices), ...) contiguous. Timed mode decodes and pre-processes
        here, one ``preprocess/<op>`` span (level ``model``) per op and sample."""
        return self.batch_with_geometry(indices, tracer)[0]

    def batch_with_geometry(self, indices: Sequence[int], tracer: Any) -> tuple[np.ndarray, list[Geometry | None]]:
        """:meth:`batch` and each row's :class:`Geometry` (timed mode: the geometry of this pre-processing)."""
        if not self.timed_preprocess:
            rows = [self.geometry[i] for i in indices]
            if len(indices) == 1:
                return self.inputs[indices[0]][np.newaxis], rows
            return np.stack([self.inputs[i] for i in indices]), rows
        done = [self._preprocess(self.encoded[i], tracer) for i in indices]
        return np.stack([x for x, _ in done]), [g for _, g in done]

    def _preprocess(self, data: bytes, tracer: Any) -> tuple[np.ndarray, Geometry | None]:
        item: Item | str = Item(np.frombuffer(data, dtype=np.uint8), "encoded")
        for op in self.pipeline.pre_ops:
            if tracer is None:
                item = apply_op(op, item)  # type: ignore[arg-type]
            else:
                with tracer.span(f"preprocess/{op.name}", "model"):
                    item = apply_op(op, item)  # type: ignore[arg-type]
            if isinstance(item, str):  # the same bytes pre-processed when loaded: not expected to fail
                raise RepliscopeError(f"pre-processing failed inside a timed query: {item}")
        assert isinstance(item, Item)
        error = shape_error(item.data, self.expected_shape)
        if error:
            raise RepliscopeError(error)
        return item.data, item.geometry

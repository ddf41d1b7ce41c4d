"""ONNX external data, checked by repliscope before ANY runtime reads an ONNX file.

An ONNX tensor may keep its bytes in another file (``data_location: EXTERNAL``, ``location: weights.bin``).
onnx and onnxruntime refuse ``..`` and absolute locations, OpenCV's importer does not: a location of
``../../../../etc/passwd`` leaks the file's bytes through the model's outputs. So every location is resolved
here first (:func:`check_external_data`, called by every ONNX load path: the onnxruntime and OpenCV DNN runners,
the diff candidates, tf2onnx outputs). Allowed: a relative path of plain components inside the model's folder
that is a regular file once symlinks are resolved, still inside the folder. Refused, naming the tensor and the
location: an absolute path (``/x``, ``\\x``, ``C:x``), a ``..`` component, a symlink (at any level) leading out
of the folder, a missing file, a non-regular file.

The entries themselves are checked the way every runtime reads them: a key given twice is refused (onnxruntime
reads the last of two ``location`` entries, OpenCV the first: with a duplicate the guard would check one file and a
runtime read another), as are keys outside the specification's (``location``, ``offset``, ``length``,
``checksum``), an ``offset`` / ``length`` that is not a plain non-negative integer, and entries on a tensor not
marked EXTERNAL. So the one location a tensor has is the one checked and the one read.

The checksum: :func:`source_sha256` is what ``source.sha256`` must equal for an ONNX source. Without external
data it is the sha256 of the model file (as for every format). With external data it is the sha256 of the text
``"<sha256 of the model file>  <model file name>\\n"`` followed by one line ``"<sha256>  <location>\\n"`` per
external file, sorted by location (the ``sha256sum`` format), so the manifest's one hash covers the model file
AND every external data file. ``repliscope manifest hash model.onnx`` prints it.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from repliscope.errors import SourceError

_DRIVE = re.compile(r"^[A-Za-z]:")


class NotOnnxError(SourceError):
    """The file does not parse as an ONNX model (it has no external data to check; a runtime refuses it)."""


@dataclass(frozen=True)
class ExternalData:
    """One external data file of an ONNX model: the first tensor naming it, its ``location`` as written,
    and the checked file (symlinks resolved, inside the model's folder)."""

    tensor: str
    location: str
    path: Path


def _tensors(graph: Any, where: str) -> Iterator[tuple[str, Any]]:
    """(name, TensorProto) of every tensor of ``graph``: initializers, sparse initializers, and the tensors of
    node attributes, recursing into subgraphs (If/Loop/Scan bodies)."""
    for t in graph.initializer:
        yield t.name, t
    for s in graph.sparse_initializer:
        yield s.values.name, s.values
        yield s.indices.name, s.indices
    for node in graph.node:
        yield from _node_tensors(node, f"{where}{node.name or node.op_type}")


def _node_tensors(node: Any, where: str) -> Iterator[tuple[str, Any]]:
    for attr in node.attribute:
        label = f"{where}.{attr.name}"
        if attr.HasField("t"):
            yield attr.t.name or label, attr.t
        for t in attr.tensors:
            yield t.name or label, t
        if attr.HasField("sparse_tensor"):
            yield attr.sparse_tensor.values.name or label, attr.sparse_tensor.values
        for s in attr.sparse_tensors:
            yield s.values.name or label, s.values
        if attr.HasField("g"):
            yield from _tensors(attr.g, f"{label}/")
        for g in attr.graphs:
            yield from _tensors(g, f"{label}/")


def _all_tensors(model: Any) -> Iterator[tuple[str, Any]]:
    yield from _tensors(model.graph, "")
    for function in model.functions:
        for node in function.node:
            yield from _node_tensors(node, f"{function.name}/{node.name or node.op_type}")
        for attr in function.attribute_proto:  # attribute defaults
            yield from _node_tensors(_Attrs([attr]), f"{function.name}/")
    for i, info in enumerate(model.training_info):
        yield from _tensors(info.initialization, f"training_info[{i}].initialization/")
        yield from _tensors(info.algorithm, f"training_info[{i}].algorithm/")


@dataclass(frozen=True)
class _Attrs:
    """A node-like holder of attributes (a function's attribute defaults)."""

    attribute: list[Any]


EXTERNAL_KEYS = ("location", "offset", "length", "checksum")
"""The ``external_data`` keys of the ONNX specification; any other key is refused."""


def _entries(model_path: Path, model: Any) -> Iterator[tuple[str, str]]:
    """(tensor name, location) of every tensor stored externally, after checking its ``external_data`` entries
    the way every runtime reads them: each key at most once (onnxruntime reads the last of two ``location``
    entries, OpenCV the first: a duplicate is refused, so the location checked is the one read), only the keys of
    the specification, ``offset`` / ``length`` plain non-negative integers, and entries only on a tensor marked
    EXTERNAL (and EXTERNAL only with entries)."""
    import onnx

    for name, tensor in _all_tensors(model):
        external = tensor.data_location == onnx.TensorProto.EXTERNAL
        if not external and not len(tensor.external_data):
            continue

        def refuse(why: str, tensor_name: str = name) -> SourceError:
            return SourceError(
                f"ONNX model {model_path}: tensor '{tensor_name}' external_data {why}; refused (each of "
                f"{', '.join(EXTERNAL_KEYS)} at most once, on a tensor whose data_location is EXTERNAL)"
            )

        if not external:
            raise refuse("entries on a tensor whose data_location is not EXTERNAL")
        entries: dict[str, str] = {}
        for entry in tensor.external_data:
            if entry.key in entries:
                raise refuse(f"has the key '{entry.key}' twice ('{entries[entry.key]}' and '{entry.value}')")
            if entry.key not in EXTERNAL_KEYS:
                raise refuse(f"has the key '{entry.key}', not one of {', '.join(EXTERNAL_KEYS)}")
            entries[entry.key] = entry.value
        for key in ("offset", "length"):
            value = entries.get(key)
            if value is not None and not (value.isascii() and value.isdigit()):
                raise refuse(f"has {key} '{value}', not a non-negative integer")
        yield name, entries.get("location", "")


def check_location(model_path: Path, tensor: str, location: str) -> Path:
    """The checked file of one external ``location`` of ``model_path`` (see the module docstring); raises
    SourceError naming the model, the tensor and the location."""

    def refuse(why: str) -> SourceError:
        return SourceError(
            f"ONNX model {model_path}: tensor '{tensor}' keeps its data in '{location}', {why}; "
            "refused (external data must be a file inside the model's folder)"
        )

    if not location:
        raise refuse("an empty location")
    if "\x00" in location:
        raise refuse("a location with a NUL byte")
    if (
        location.startswith(("/", "\\"))
        or _DRIVE.match(location)
        or PureWindowsPath(location).is_absolute()
        or PurePosixPath(location).is_absolute()
    ):
        raise refuse("an absolute path")
    parts = re.split(r"[/\\]", location)
    if ".." in parts:
        raise refuse("a path leaving the model's folder ('..')")
    folder = model_path.resolve().parent
    target = folder.joinpath(*[p for p in parts if p not in ("", ".")])
    resolved = Path(os.path.realpath(target))
    if not resolved.is_relative_to(folder):
        raise refuse(f"a symlink leading out of the model's folder (to {resolved})")
    try:
        mode = os.stat(resolved).st_mode
    except OSError as exc:
        raise refuse(f"a file that cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        raise refuse("not a regular file")
    return resolved


def external_data_files(model_path: str | Path) -> list[ExternalData]:
    """Every external data file of the ONNX model at ``model_path``, each checked (:func:`check_location`),
    one entry per distinct location, sorted by location. [] for a self-contained model. Raises SourceError for
    a refused location or a file that is not an ONNX model."""
    try:
        import onnx
        from google.protobuf.message import DecodeError
    except ImportError:
        raise SourceError(
            f"{model_path}: the onnx package is needed to check the model's external data before "
            "a runtime reads it (pip install 'repliscope[onnx]')"
        ) from None
    path = Path(model_path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, OSError) as exc:
        raise NotOnnxError(f"{path} is not a readable ONNX model: {type(exc).__name__}: {exc}") from exc
    found: dict[str, ExternalData] = {}
    for tensor, location in _entries(path, model):
        if location not in found:
            found[location] = ExternalData(tensor, location, check_location(path, tensor, location))
    return [found[k] for k in sorted(found)]


def check_external_data(model_path: str | Path) -> list[ExternalData]:
    """The guard every ONNX load path calls before handing ``model_path`` to a runtime (as
    :func:`external_data_files`; a file that does not parse as ONNX is left to the runtime, which refuses it with
    its own message: there is no external data to follow)."""
    try:
        return external_data_files(model_path)
    except NotOnnxError:
        return []


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def source_sha256(model_path: str | Path) -> tuple[str, list[tuple[str, str]]]:
    """(the sha256 ``source.sha256`` must equal, [(location, sha256)] of the external files) for the ONNX model
    at ``model_path``; see the module docstring for the set hash used when there is external data."""
    path = Path(model_path)
    files = external_data_files(path)
    model_digest = _file_sha256(path)
    if not files:
        return model_digest, []
    listed = [(f.location, _file_sha256(f.path)) for f in files]
    text = f"{model_digest}  {path.name}\n" + "".join(f"{digest}  {loc}\n" for loc, digest in listed)
    return hashlib.sha256(text.encode("utf-8")).hexdigest(), listed

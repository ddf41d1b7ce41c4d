"""Format conversions as registered, composable, cache-checked loaders (after Polygraphy's loader chain).

A :class:`Conversion` turns an artifact of one format into a file of another (torch -> ONNX, TFLite -> ONNX,
darknet -> ONNX, ...); every conversion is declared once in :data:`repliscope.backends.CONVERSION_TARGETS` and
registered in :data:`repliscope.backends.CONVERSIONS` under ``"<source>-><target>"``. :func:`chain` builds the
loader that reaches a target format from an artifact's format: a :class:`SourceLoader` wrapped in one
:class:`ConvertLoader` per registered conversion on the shortest route (so a route of two conversions composes
without code), and :func:`load_as` runs it.

Every conversion goes through ONE verified cache (:meth:`Conversion.cached`):

- the converter writes ASIDE (a hidden temporary name in the cache folder), the written file is verified (it
  exists, is not empty; an ONNX file passes the external-data guard,
  :func:`repliscope.runtimes.onnx_external.check_external_data`) and hashed, then renamed into place atomically;
- a sidecar ``<name>.json`` (written atomically, after the model) records the conversion's INPUTS (the sha256 of
  each input file as the manifest declares and the fetch verified it, plus whatever else shapes the output:
  converter version, opset, input size) and the OUTPUT's sha256 (``onnx_sha256`` for an ONNX target);
- a cached file is used only when the sidecar's inputs are the current artifact's AND the file's sha256 is the
  recorded one; anything else (missing or unreadable sidecar, other inputs, an edited or truncated file) is
  converted again, and why is recorded in the notes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import uuid
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from repliscope.backends import CONVERSIONS, ONNX_MODELS
from repliscope.registry import Registry
from repliscope.runtimes.errors import ModelLoadError

if TYPE_CHECKING:
    from repliscope.runtimes.base import ModelArtifact


def file_sha256(path: Path) -> str:
    """sha256 hex digest of the file at ``path``."""
    with Path(path).open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` beside ``path`` then rename it into place (a reader sees the old file or the new one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class Conversion(ABC):
    """One registered conversion from ``source`` format to ``target`` format.

    A subclass says where the output is cached (:meth:`cache_path`), what it depends on (:meth:`inputs`: the
    input files' sha256 and the converter's parameters; recorded in the sidecar and compared on every hit) and how
    to write it (:meth:`convert`, to the path it is given). :meth:`cached` is the one cache they all share."""

    source: str
    target: str
    notes_key: ClassVar[str] = "conversion"
    """Where the runner's notes (the record's ``runtime``) keep this conversion's info."""
    path_key: ClassVar[str] = "onnx_path"
    """The info key holding the converted file's path."""
    stale_key: ClassVar[str] = "reconverted_because"
    """The info key saying why a cached file was not used (only when one existed)."""
    notes_carry_inputs: ClassVar[bool] = False
    """Whether the returned info (the notes) repeats the sidecar's ``inputs``."""

    @property
    def output_sha256_key(self) -> str:
        return f"{self.target}_sha256"

    @abstractmethod
    def cache_path(self, artifact: ModelArtifact, cache_dir: Path) -> Path:
        """Where the conversion of ``artifact`` is (or will be) cached."""

    @abstractmethod
    def inputs(self, artifact: ModelArtifact) -> dict[str, Any]:
        """What the output depends on, JSON-serialisable: every input file's sha256 and the converter's
        parameters. A cached file is used only when its sidecar records exactly these."""

    @abstractmethod
    def convert(self, artifact: ModelArtifact, out: Path) -> dict[str, Any]:
        """Write the converted model to ``out`` (a temporary name in the cache folder); returns its provenance
        (converter, version, opset, seconds...)."""

    def check_source(self, artifact: ModelArtifact) -> None:
        """Refuse an artifact of another format."""
        if artifact.format != self.source:
            raise ModelLoadError(
                f"the {self.source} -> {self.target} conversion takes a '{self.source}' source, not '{artifact.format}'"
            )

    def verify(self, written: Path) -> None:
        """Check the written file before it is renamed into place: present and not empty; an ONNX file's
        external data is checked by the one guard every ONNX reader uses."""
        if not written.is_file() or written.stat().st_size == 0:
            raise ModelLoadError(f"the {self.source} -> {self.target} conversion wrote no model (empty {written})")
        if self.target == "onnx":
            from repliscope.runtimes.onnx_external import check_external_data

            check_external_data(written)

    def cached(self, artifact: ModelArtifact, cache_dir: Path) -> tuple[Path, dict[str, Any]]:
        """``(path, info)``: the cached conversion when verified (``info["cached"]`` True), else a fresh one."""
        self.check_source(artifact)
        path = self.cache_path(artifact, Path(cache_dir))
        sidecar = path.with_suffix(".json")
        inputs = self.inputs(artifact)
        info, stale = self._hit(path, sidecar, inputs)
        if info is not None:
            return path, self._notes(info, path, cached=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp{path.suffix}")
        try:
            made = self.convert(artifact, tmp)
            self.verify(tmp)
            record = {**made, self.path_key: str(path), "inputs": inputs, self.output_sha256_key: file_sha256(tmp)}
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        write_text_atomic(sidecar, json.dumps(record, indent=1, sort_keys=True))
        notes = self._notes(record, path, cached=False)
        if stale is not None:
            notes[self.stale_key] = stale
        return path, notes

    def _hit(self, path: Path, sidecar: Path, inputs: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """(the recorded info, None) for a verified hit; (None, why not) when a cached file exists but cannot be
        used; (None, None) when nothing is cached."""
        if not path.is_file():
            return None, None
        try:
            info = json.loads(sidecar.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return None, f"its sidecar {sidecar.name} is missing or unreadable"
        recorded = info.get(self.output_sha256_key) if isinstance(info, dict) else None
        if not isinstance(recorded, str):
            return None, f"its sidecar {sidecar.name} records no {self.output_sha256_key}"
        # JSON round trip: the recorded inputs come back as JSON types (lists, not tuples)
        if info.get("inputs") != json.loads(json.dumps(inputs)):
            return None, "its sidecar records other inputs than this source's"
        digest = file_sha256(path)
        if digest != recorded:
            return None, f"cached file's sha256 {digest[:16]} differs from the recorded {recorded[:16]}"
        return info, None

    def _notes(self, record: dict[str, Any], path: Path, *, cached: bool) -> dict[str, Any]:
        notes = {k: v for k, v in record.items() if self.notes_carry_inputs or k != "inputs"}
        notes[self.path_key] = str(path)
        notes["cached"] = cached
        return notes


# -- the loader chain -------------------------------------------------------------------------------------------


class Loader(Protocol):
    """A callable that yields a model artifact (a file in some format); loaders wrap loaders."""

    def __call__(self) -> ModelArtifact: ...


@dataclass(frozen=True)
class SourceLoader:
    """The manifest's own (verified) source, as is."""

    artifact: ModelArtifact

    def __call__(self) -> ModelArtifact:
        return self.artifact


@dataclass(frozen=True)
class ConvertLoader:
    """``conversion`` applied (through its verified cache) to what ``inner`` yields; the conversion's info is
    handed to ``record``."""

    conversion: Conversion
    inner: Loader
    cache_dir: Path
    record: Callable[[Conversion, dict[str, Any]], None]

    def __call__(self) -> ModelArtifact:
        artifact = self.inner()
        path, info = self.conversion.cached(artifact, self.cache_dir)
        self.record(self.conversion, info)
        return dataclasses.replace(
            artifact,
            path=path,
            sha256=info[self.conversion.output_sha256_key],
            format=self.conversion.target,  # type: ignore[arg-type]
            architecture=None,
            config_path=None,
            config_sha256=None,
        )


def route(source: str, target: str, registry: Registry[Conversion] | None = None) -> list[Conversion]:
    """The shortest chain of registered conversions from ``source`` to ``target`` ([] when they are equal)."""
    registry = CONVERSIONS if registry is None else registry  # its entries are Conversion instances
    if source == target:
        return []
    edges: dict[str, list[tuple[str, str]]] = {}
    for name in registry.names():
        src, _, dst = name.partition("->")
        edges.setdefault(src, []).append((dst, name))
    previous: dict[str, tuple[str, str]] = {}
    queue = deque([source])
    while queue:
        here = queue.popleft()
        for there, name in edges.get(here, []):
            if there in previous or there == source:
                continue
            previous[there] = (here, name)
            if there == target:
                names: list[str] = []
                while there != source:
                    there, name = previous[there]
                    names.append(name)
                return [registry.get(n) for n in reversed(names)]
            queue.append(there)
    reachable = sorted({n.partition("->")[0] for n in registry.names() if n.endswith(f"->{target}")})
    raise ModelLoadError(
        f"no conversion from source format '{source}' to '{target}' (formats converted to {target}: "
        f"{', '.join([target, *reachable])}); run it on a runtime that reads '{source}' natively"
    )


def chain(
    artifact: ModelArtifact,
    target: str,
    cache_dir: Path,
    notes: dict[str, Any],
    registry: Registry[Conversion] | None = None,
) -> Loader:
    """The loader yielding ``artifact`` as ``target``: the source itself, or the source through each conversion on
    the route. Each conversion's info goes to ``notes[conversion.notes_key]`` (e.g. ``notes["export"]`` for the torch
    export); a route of several conversions records them in order under ``notes["conversions"]``."""
    steps = route(artifact.format, target, registry)

    def record(conversion: Conversion, info: dict[str, Any]) -> None:
        if len(steps) == 1:  # "from" / "to" as each link of a route has them (a converter may name "from" itself)
            notes[conversion.notes_key] = {"from": conversion.source, "to": conversion.target, **info}
        else:
            notes.setdefault("conversions", []).append({"from": conversion.source, "to": conversion.target, **info})

    loader: Loader = SourceLoader(artifact)
    for conversion in steps:
        loader = ConvertLoader(conversion, loader, Path(cache_dir), record)
    return loader


def load_as(
    artifact: ModelArtifact,
    target: str,
    cache_dir: Path,
    notes: dict[str, Any],
    registry: Registry[Conversion] | None = None,
) -> Path:
    """The file of ``artifact`` in ``target`` format (the source itself, or its verified cached conversion)."""
    return chain(artifact, target, cache_dir, notes, registry)().path


# -- models of several graphs -----------------------------------------------------------------------------------

Net = Callable[[np.ndarray], list[np.ndarray]]
"""One loaded graph: a batch -> its outputs, in the order of the output names it was opened with."""


class GraphModel(Protocol):
    """A model of several ONNX graphs plus the code between them (registered in
    :data:`repliscope.backends.ONNX_MODELS` by source format). An ONNX runner opens each graph its own way
    (``open_net(path, output names)``) and the model drives them; the runner never knows which model it runs."""

    single_output_error: ClassVar[str]
    """Why ``Runner.infer`` (one score output) does not apply, e.g. "gives detections"."""

    @classmethod
    def load(
        cls, artifact: ModelArtifact, open_net: Callable[[Path, list[str]], Net], notes: dict[str, Any]
    ) -> GraphModel: ...

    def infer_outputs(self, batch: np.ndarray, names: tuple[str, ...]) -> dict[str, np.ndarray]: ...


def graph_model(artifact: ModelArtifact) -> type[GraphModel] | None:
    """The registered multi-graph model class of ``artifact``'s format, or None for a single graph."""
    if artifact.format not in ONNX_MODELS:
        return None
    model: type[GraphModel] = ONNX_MODELS.get(artifact.format)
    return model

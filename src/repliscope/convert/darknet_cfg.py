"""Darknet's ``.cfg`` network description and ``.weights`` file, read as Darknet (pjreddie, 2018) reads them.

``read_cfg``: sections ``[name]`` with ``key=value`` options; like Darknet's ``read_cfg`` every whitespace
character of a line is removed and lines starting with ``#`` or ``;`` are comments. Supported sections (the
YOLOv3 family): ``net``/``network``, ``convolutional``/``conv``, ``maxpool``/``max``, ``route``, ``upsample``,
``shortcut``, ``yolo``; any other is an error naming the section and its line.

``plan_layers``: every layer with its input / output shape (C, H, W) and the parameters the converter and the
runtime need, computed with Darknet's own integer formulas (``make_convolutional_layer``,
``make_maxpool_layer`` with ``padding = size - 1`` by default, ``make_route_layer``, ...). Layer names keep
Darknet's numbering: ``<section>_<index>`` (``convolutional_0``, ``maxpool_11``, ``yolo_16``).

``read_weights``: the header (major, minor, revision, images seen: a size_t from format 0.2 on, else an int)
then, per convolutional layer in order, biases, [BN scales, rolling mean, rolling variance] and the kernel
(filters x channels x size x size), float32. Darknet itself reads past the end silently; here a truncated file
is an error with the expected and actual sizes, and a cfg that does not match the weights names the layer
where the counts diverge (its batch-norm variances are not all positive there, or the file ends inside it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.errors import RepliscopeError

SECTION_ALIASES = {
    "net": "net",
    "network": "net",
    "convolutional": "convolutional",
    "conv": "convolutional",
    "maxpool": "maxpool",
    "max": "maxpool",
    "route": "route",
    "upsample": "upsample",
    "shortcut": "shortcut",
    "yolo": "yolo",
}
ACTIVATIONS = ("leaky", "linear", "relu", "logistic")


class DarknetFormatError(RepliscopeError):
    """A .cfg or .weights file repliscope cannot read as Darknet would (names the file, line or layer)."""


@dataclass
class Section:
    """One ``[name]`` block: its canonical type, the line it starts on and its options (raw strings)."""

    type: str
    line: int
    options: dict[str, str]
    option_lines: dict[str, int] = field(default_factory=dict)


@dataclass
class LayerPlan:
    """A network layer (every section after ``[net]``) with shapes (C, H, W) and resolved parameters."""

    index: int
    type: str
    line: int
    in_shape: tuple[int, int, int]
    out_shape: tuple[int, int, int]
    params: dict[str, object]

    @property
    def name(self) -> str:
        return f"{self.type}_{self.index}"


@dataclass
class Network:
    """The ``[net]`` options that matter for inference and the layers."""

    width: int
    height: int
    channels: int
    layers: list[LayerPlan]
    path: Path | None = None

    def layer(self, name: str) -> LayerPlan:
        for lay in self.layers:
            if lay.name == name:
                return lay
        raise DarknetFormatError(f"no layer named {name!r} (layers: {', '.join(x.name for x in self.layers)})")


def read_cfg(path: Path | str, text: str | None = None) -> list[Section]:
    """Sections of a .cfg file (``text`` instead of reading ``path`` when given)."""
    path = Path(path)
    if text is None:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DarknetFormatError(f"{path}: cannot read the cfg: {exc}") from exc
    sections: list[Section] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = "".join(raw.split())
        if not line or line[0] in "#;":
            continue
        if line[0] == "[":
            if not line.endswith("]"):
                raise DarknetFormatError(f"{path}:{lineno}: unterminated section header {raw.strip()!r}")
            name = line[1:-1]
            if name not in SECTION_ALIASES:
                raise DarknetFormatError(
                    f"{path}:{lineno}: unknown cfg section [{name}] (supported: "
                    f"{', '.join(sorted(set(SECTION_ALIASES)))})"
                )
            sections.append(Section(SECTION_ALIASES[name], lineno, {}))
            continue
        if not sections:
            raise DarknetFormatError(f"{path}:{lineno}: option {line!r} before any [section]")
        key, eq, value = line.partition("=")
        if not eq:
            raise DarknetFormatError(f"{path}:{lineno}: expected key=value, got {raw.strip()!r}")
        sections[-1].options[key] = value
        sections[-1].option_lines[key] = lineno
    if not sections or sections[0].type != "net":
        raise DarknetFormatError(f"{path}: the first section must be [net] or [network]")
    return sections


def _int(sec: Section, key: str, default: int | None, path: Path) -> int:
    if key not in sec.options:
        if default is None:
            raise DarknetFormatError(f"{path}:{sec.line}: [{sec.type}] needs '{key}'")
        return default
    try:
        return int(sec.options[key])
    except ValueError as exc:
        raise DarknetFormatError(
            f"{path}:{sec.option_lines[key]}: '{key}' must be an integer, got {sec.options[key]!r}"
        ) from exc


def _float(sec: Section, key: str, default: float, path: Path) -> float:
    try:
        return float(sec.options.get(key, default))
    except ValueError as exc:
        raise DarknetFormatError(f"{path}:{sec.option_lines[key]}: '{key}' must be a number") from exc


def _ints(sec: Section, key: str, path: Path) -> list[int]:
    raw = sec.options.get(key, "")
    try:
        return [int(v) for v in raw.split(",") if v != ""]
    except ValueError as exc:
        raise DarknetFormatError(
            f"{path}:{sec.option_lines.get(key, sec.line)}: '{key}' must be integers separated by commas, got {raw!r}"
        ) from exc


def plan_layers(
    sections: list[Section], path: Path | str = "<cfg>", input_hw: tuple[int, int] | None = None
) -> Network:
    """Shapes and parameters of every layer, as Darknet's ``parse_network_cfg`` computes them.

    ``input_hw``: (height, width) instead of the ``[net]`` section's, as ``resize_network`` runs a cfg at another
    input size (YOLO cfgs are size-agnostic: 416 and 608 are the same weights)."""
    path = Path(path)
    net = sections[0]
    h, w, c = _int(net, "height", None, path), _int(net, "width", None, path), _int(net, "channels", 3, path)
    if input_hw is not None:
        if len(input_hw) != 2 or min(input_hw) < 1:
            raise DarknetFormatError(
                f"{path}: input size {list(input_hw)} must be two positive integers [height, width]"
            )
        h, w = int(input_hw[0]), int(input_hw[1])
    shape = (c, h, w)
    layers: list[LayerPlan] = []
    for index, sec in enumerate(sections[1:]):
        where = f"{path}:{sec.line}: [{sec.type}] (layer {index})"
        params: dict[str, object] = {}
        cin, hin, win = shape
        if sec.type == "convolutional":
            filters, size = _int(sec, "filters", 1, path), _int(sec, "size", 1, path)
            stride, groups = _int(sec, "stride", 1, path), _int(sec, "groups", 1, path)
            pad = size // 2 if _int(sec, "pad", 0, path) else _int(sec, "padding", 0, path)
            act = sec.options.get("activation", "logistic")
            if act not in ACTIVATIONS:
                raise DarknetFormatError(f"{where}: activation '{act}' is not supported ({', '.join(ACTIVATIONS)})")
            if groups != 1 or cin % groups:
                raise DarknetFormatError(f"{where}: groups={groups} is not supported (1)")
            params = {
                "filters": filters,
                "size": size,
                "stride": stride,
                "pad": pad,
                "activation": act,
                "batch_normalize": bool(_int(sec, "batch_normalize", 0, path)),
            }
            shape = (filters, (hin + 2 * pad - size) // stride + 1, (win + 2 * pad - size) // stride + 1)
        elif sec.type == "maxpool":
            size = _int(sec, "size", 1, path)
            stride = _int(sec, "stride", 1, path)
            padding = _int(sec, "padding", size - 1, path)
            params = {"size": size, "stride": stride, "padding": padding}
            shape = (cin, (hin + padding - size) // stride + 1, (win + padding - size) // stride + 1)
        elif sec.type == "upsample":
            stride = _int(sec, "stride", 2, path)
            if stride < 1:
                raise DarknetFormatError(f"{where}: stride {stride} (a downsampling upsample) is not supported")
            params = {"stride": stride, "scale": _float(sec, "scale", 1.0, path)}
            shape = (cin, hin * stride, win * stride)
        elif sec.type == "route":
            refs = _ints(sec, "layers", path)
            if not refs:
                raise DarknetFormatError(f"{where}: 'layers' is required")
            absolute = [r + index if r < 0 else r for r in refs]
            bad = [r for r in absolute if not 0 <= r < index]
            if bad:
                raise DarknetFormatError(f"{where}: layers {refs} point at {bad}, not an earlier layer")
            shapes = [layers[r].out_shape for r in absolute]
            if any(s[1:] != shapes[0][1:] for s in shapes):
                raise DarknetFormatError(f"{where}: routed layers have different sizes {shapes}")
            params = {"layers": absolute}
            shape = (sum(s[0] for s in shapes), shapes[0][1], shapes[0][2])
        elif sec.type == "shortcut":
            frm = _int(sec, "from", None, path)
            src = frm + index if frm < 0 else frm
            if not 0 <= src < index or layers[src].out_shape != shape:
                raise DarknetFormatError(f"{where}: from={frm} must name an earlier layer of shape {shape}")
            act = sec.options.get("activation", "linear")
            alpha, beta = _float(sec, "alpha", 1.0, path), _float(sec, "beta", 1.0, path)
            if act != "linear" or alpha != 1.0 or beta != 1.0:
                raise DarknetFormatError(f"{where}: only a linear shortcut with alpha = beta = 1 is supported")
            params = {"from": src}
        elif sec.type == "yolo":
            classes, total = _int(sec, "classes", 20, path), _int(sec, "num", 1, path)
            mask = _ints(sec, "mask", path) or list(range(total))
            anchors = _ints(sec, "anchors", path)
            if len(anchors) != 2 * total or any(not 0 <= m < total for m in mask):
                raise DarknetFormatError(f"{where}: anchors must hold num={total} pairs and mask indices below it")
            if cin != len(mask) * (classes + 5):
                raise DarknetFormatError(
                    f"{where}: its input has {cin} channels, mask x (classes + 5) = {len(mask) * (classes + 5)}"
                )
            params = {
                "classes": classes,
                "mask": mask,
                "anchors": [(anchors[2 * i], anchors[2 * i + 1]) for i in range(total)],
            }
        elif sec.type == "net":
            raise DarknetFormatError(f"{where}: a second [net] section")
        layers.append(LayerPlan(index, sec.type, sec.line, (cin, hin, win), shape, params))
    return Network(w, h, c, layers, path)


def artifact_size(artifact: Any) -> tuple[int, int] | None:
    """(height, width) of a darknet artifact's NCHW input when fixed, else None (the cfg's own size)."""
    shape = tuple(artifact.input_shape)
    if len(shape) == 4 and all(d is not None and d > 0 for d in shape[2:]):
        return int(shape[2]), int(shape[3])
    return None


def load_network_cfg(path: Path | str, size: tuple[int, int] | None = None) -> Network:
    """The cfg's layers at its ``[net]`` size, or at ``size`` (height, width)."""
    return plan_layers(read_cfg(path), path, size)


@dataclass
class ConvWeights:
    """One convolutional layer's arrays (float32): ``biases`` (n,), BN ``scales``/``mean``/``variance`` (n,) or
    None, ``kernel`` (n, c, size, size)."""

    biases: np.ndarray
    scales: np.ndarray | None
    mean: np.ndarray | None
    variance: np.ndarray | None
    kernel: np.ndarray


@dataclass
class Weights:
    version: tuple[int, int, int]
    seen: int
    layers: dict[str, ConvWeights]


def _header_size(major: int, minor: int) -> int:
    return 12 + (8 if (major * 10 + minor) >= 2 and major < 1000 and minor < 1000 else 4)


def expected_sizes(net: Network) -> list[tuple[LayerPlan, int]]:
    """(layer, float32 count) of every layer holding weights, in file order."""
    out = []
    for lay in net.layers:
        if lay.type == "convolutional":
            n, size = int(lay.params["filters"]), int(lay.params["size"])  # type: ignore[call-overload]
            count = n * (4 if lay.params["batch_normalize"] else 1) + n * lay.in_shape[0] * size * size
            out.append((lay, count))
    return out


def read_weights(path: Path | str, net: Network) -> Weights:
    """Every convolutional layer's weights (see the module doc for the errors)."""
    path = Path(path)
    data = path.read_bytes()
    if len(data) < 12:
        raise DarknetFormatError(f"{path}: {len(data)} bytes, shorter than the 12-byte header")
    major, minor, revision = (int(v) for v in np.frombuffer(data[:12], "<i4"))
    header = _header_size(major, minor)
    seen = int(np.frombuffer(data[12:header], "<u8" if header == 20 else "<u4")[0])
    sizes = expected_sizes(net)
    total = header + 4 * sum(n for _, n in sizes)
    offset = header
    layers: dict[str, ConvWeights] = {}
    for lay, count in sizes:
        n, size, cin = int(lay.params["filters"]), int(lay.params["size"]), lay.in_shape[0]  # type: ignore[call-overload]
        end = offset + 4 * count
        if end > len(data):
            raise DarknetFormatError(
                f"{path}: truncated or not this cfg's weights: {len(data)} bytes, the cfg needs {total} "
                f"(header {header} + {(total - header) // 4} floats); the file ends inside layer {lay.index} "
                f"({lay.name}, cfg line {lay.line}) at byte {offset} of its {4 * count}-byte block"
            )
        arr = np.frombuffer(data[offset:end], "<f4")
        biases, rest = arr[:n], arr[n:]
        scales = mean = variance = None
        if lay.params["batch_normalize"]:
            scales, mean, variance, rest = rest[:n], rest[n : 2 * n], rest[2 * n : 3 * n], rest[3 * n :]
            if not (np.all(np.isfinite(variance)) and np.all(variance >= 0) and np.all(np.isfinite(mean))):
                raise DarknetFormatError(
                    f"{path}: the cfg and the weights diverge at layer {lay.index} ({lay.name}, cfg line {lay.line}): "
                    f"its batch-norm variances read at byte {offset + 12 * n} are not all finite and >= 0 "
                    f"(min {float(np.nanmin(variance)):.3g}); the layers before it read consistently"
                )
        kernel = rest.reshape(n, cin, size, size)
        layers[lay.name] = ConvWeights(
            biases.copy(),
            None if scales is None else scales.copy(),
            None if mean is None else mean.copy(),
            None if variance is None else variance.copy(),
            kernel.copy(),
        )
        offset = end
    if offset != len(data):
        last = sizes[-1][0] if sizes else None
        raise DarknetFormatError(
            f"{path}: {len(data)} bytes, the cfg needs {total}: {len(data) - offset} bytes are left after the last "
            f"layer with weights{f' ({last.name}, cfg line {last.line})' if last else ''}: not this cfg's weights"
        )
    return Weights((major, minor, revision), seen, layers)

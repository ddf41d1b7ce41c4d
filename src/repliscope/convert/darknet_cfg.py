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

import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
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
POLICIES = ("constant", "exp", "poly", "random", "sigmoid", "step", "steps")
"""``get_policy``'s names (another name is read as ``constant`` with a message: refused here)."""

INT32_MAX = 2**31 - 1
MAX_SIDE = 8192
"""Largest ``[net]`` width / height (and ``input_hw``) accepted."""
MAX_CHANNELS = 64
MAX_FILTERS = 16384
MAX_KERNEL = 63
"""Largest convolution / maxpool ``size``."""
MAX_STRIDE = 64
MAX_BATCH = 64
"""Largest batch libdarknet allocates for (``batch / subdivisions * time_steps`` of ``[net]``)."""
MAX_ACTIVATIONS = 2**28
"""Floats of every layer's outputs for one image (1 GiB; libdarknet fills 2 to 4 buffers of that size; the buffers
for the cfg's whole batch are allocated but only one image's part is touched)."""
MAX_LAYER_WEIGHTS = 2**28
"""Floats of one convolution's kernel (``channels x filters x size x size``, an ``int`` in libdarknet)."""
MAX_WORKSPACE = 2**30
"""Floats of one convolution's im2col workspace (``out_h x out_w x size x size x channels``)."""

_C_STRIPPED = b" \t\n"
"""What Darknet's ``strip()`` (utils.c) removes from a line: spaces, tabs and newlines, nothing else."""
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_C_SPACE = " \t\n\v\f\r"


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
    batch: int = 1
    """libdarknet's batch for this cfg (``batch / subdivisions * time_steps``): what its buffers hold."""

    def layer(self, name: str) -> LayerPlan:
        for lay in self.layers:
            if lay.name == name:
                return lay
        raise DarknetFormatError(f"no layer named {name!r} (layers: {', '.join(x.name for x in self.layers)})")


def c_atoi(raw: str) -> int:
    """What glibc's ``atoi`` returns for ``raw``: ``(int) strtol(raw, NULL, 10)`` (leading C spaces, a sign, the
    longest run of digits; a ``long`` overflow saturates, then the cast keeps the low 32 bits)."""
    text = raw.lstrip(_C_SPACE)
    sign, digits = 1, ""
    if text[:1] in "+-" and text:
        sign, text = (-1 if text[0] == "-" else 1), text[1:]
    for ch in text:
        if not "0" <= ch <= "9":
            break
        digits += ch
    value = sign * int(digits) if digits else 0
    value = max(-(2**63), min(2**63 - 1, value))
    return (value + 2**31) % 2**32 - 2**31


def _python_int(raw: str) -> int | None:
    try:
        return int(raw)
    except ValueError:
        return None


def _byte_name(b: int) -> str:
    names = {0x0D: "a carriage return (a Windows CRLF line end: convert the file to LF)", 0x0B: "a vertical tab"}
    names[0x0C] = "a form feed"
    if b in names:
        return names[b]
    return f"the non-ASCII byte 0x{b:02x}" if b >= 0x80 else f"the control byte 0x{b:02x}"


def read_cfg(path: Path | str, text: str | None = None) -> list[Section]:
    """Sections of a .cfg file (``text`` instead of reading ``path`` when given), read line by line exactly as
    Darknet's ``read_cfg`` does (lines end at ``\\n`` only; ``strip()`` removes spaces, tabs and newlines, nothing
    else), refusing every line the two would read differently: a byte Darknet keeps but Python would drop or
    split on (a carriage return, a form feed, non-ASCII), a NUL, an option without ``=`` or without a value
    (Darknet drops it and uses the default), and an option given twice (Darknet uses the first)."""
    path = Path(path)
    if text is None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise DarknetFormatError(f"{path}: cannot read the cfg: {exc}") from exc
    else:
        data = text.encode("utf-8")
    if b"\0" in data:
        nul_line = data[: data.index(b"\0")].count(b"\n") + 1
        raise DarknetFormatError(f"{path}:{nul_line}: a NUL byte (libdarknet's C strings end there): not a text cfg")
    sections: list[Section] = []
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        stripped = raw.translate(None, _C_STRIPPED)
        if not stripped or stripped[:1] in (b"#", b";"):
            continue
        bad = next((b for b in stripped if not 0x21 <= b <= 0x7E), None)
        if bad is not None:
            raise DarknetFormatError(
                f"{path}:{lineno}: {_byte_name(bad)} in {raw.decode('utf-8', 'replace').strip()!r}: libdarknet "
                "removes only spaces, tabs and newlines from a line and would keep it; refused (outside comments "
                "a cfg line holds printable ASCII, spaces and tabs)"
            )
        line = stripped.decode("ascii")
        if line[0] == "[":
            if not line.endswith("]"):
                raise DarknetFormatError(f"{path}:{lineno}: unterminated section header {line!r}")
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
        if not eq or not key:
            raise DarknetFormatError(f"{path}:{lineno}: expected key=value, got {raw.decode('ascii').strip()!r}")
        if not value:
            raise DarknetFormatError(
                f"{path}:{lineno}: '{key}=' has no value (libdarknet drops the line and uses its default); give one"
            )
        sec = sections[-1]
        if key in sec.options:
            raise DarknetFormatError(
                f"{path}:{lineno}: '{key}' is given twice in section {len(sections) - 1} [{sec.type}] (first on line "
                f"{sec.option_lines[key]}; libdarknet uses the first, repliscope refuses to guess): keep one"
            )
        sec.options[key] = value
        sec.option_lines[key] = lineno
    if not sections or sections[0].type != "net":
        raise DarknetFormatError(f"{path}: the first section must be [net] or [network]")
    return sections


class _Options:
    """One section's options read with libdarknet's ``option_find_int`` / ``option_find_float`` semantics: a value
    is accepted only where C's ``atoi`` / ``atof`` and Python read the same number, and only in its range."""

    def __init__(self, sec: Section, path: Path, index: int) -> None:
        self.sec, self.path, self.index = sec, path, index
        layer = f" (layer {index - 1})" if index else ""
        self.where = f"{path}:{sec.line}: section {index} [{sec.type}]{layer}"

    def at(self, key: str) -> str:
        layer = f" (layer {self.index - 1})" if self.index else ""
        return f"{self.path}:{self.sec.option_lines[key]}: section {self.index} [{self.sec.type}]{layer} '{key}'"

    def integer(self, key: str, default: int | None, lo: int, hi: int, allowed: str | None = None) -> int:
        allowed = allowed or (f"{lo}" if lo == hi else f"an integer {lo}..{hi}")
        raw = self.sec.options.get(key)
        if raw is None:
            if default is None:
                raise DarknetFormatError(f"{self.where}: '{key}' is required (allowed: {allowed})")
            return default
        value = self._int(key, raw, allowed)
        if not lo <= value <= hi:
            raise DarknetFormatError(f"{self.at(key)}={raw} is out of range (allowed: {allowed})")
        return value

    def _int(self, key: str, raw: str, allowed: str) -> int:
        if not _INT.fullmatch(raw):
            python = _python_int(raw)
            also = f", Python's int() {python}" if python is not None and python != c_atoi(raw) else ""
            raise DarknetFormatError(
                f"{self.at(key)}={raw} is not a plain decimal integer (libdarknet's atoi reads {c_atoi(raw)}{also}); "
                f"allowed: {allowed}"
            )
        return int(raw)

    def number(self, key: str, default: float, lo: float | None = None, hi: float | None = None) -> float:
        raw = self.sec.options.get(key)
        if raw is None:
            return default
        value = self._float(key, raw, self._float_allowed(lo, hi))
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise DarknetFormatError(f"{self.at(key)}={raw} is out of range (allowed: {self._float_allowed(lo, hi)})")
        return value

    @staticmethod
    def _float_allowed(lo: float | None, hi: float | None) -> str:
        if lo is not None and hi is not None:
            return f"{lo:g}" if lo == hi else f"a decimal number {lo:g}..{hi:g}"
        return f"a decimal number >= {lo:g}" if lo is not None else "a decimal number such as 0.5, .1 or 1e-3"

    def _float(self, key: str, raw: str, allowed: str) -> float:
        value = float(raw) if _FLOAT.fullmatch(raw) else math.nan
        if not math.isfinite(value):
            raise DarknetFormatError(
                f"{self.at(key)}={raw} is not a plain finite decimal number (libdarknet reads it with atof, "
                f"Python with float(): they differ on hex, underscores and trailing text); allowed: {allowed}"
            )
        return value

    def ints(self, key: str, lo: int, hi: int, allowed: str) -> list[int] | None:
        raw = self.sec.options.get(key)
        if raw is None:
            return None
        out = []
        for item in self._items(key, raw, allowed):
            value = self._int(key, item, allowed)
            if not lo <= value <= hi:
                raise DarknetFormatError(f"{self.at(key)}={raw}: {item} is out of range (allowed: {allowed})")
            out.append(value)
        return out

    def floats(self, key: str, positive: bool) -> list[float] | None:
        raw = self.sec.options.get(key)
        if raw is None:
            return None
        allowed = "positive decimal numbers separated by commas" if positive else "decimal numbers separated by commas"
        out = [self._float(key, item, allowed) for item in self._items(key, raw, allowed)]
        if positive and any(v <= 0 for v in out):
            raise DarknetFormatError(f"{self.at(key)}={raw}: not all positive (allowed: {allowed})")
        return out

    def _items(self, key: str, raw: str, allowed: str) -> list[str]:
        items = raw.split(",")
        if "" in items:  # libdarknet counts commas and reads "" as 0: a trailing comma is one more entry
            raise DarknetFormatError(
                f"{self.at(key)}={raw} has an empty entry (libdarknet reads it as 0); allowed: {allowed}"
            )
        return items

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.sec.options.get(key, default)
        if value not in choices:
            raise DarknetFormatError(f"{self.at(key)}={value} is not supported (allowed: {', '.join(choices)})")
        return value

    def forbid(self, key: str, why: str) -> None:
        if key in self.sec.options:
            raise DarknetFormatError(f"{self.at(key)}={self.sec.options[key]}: {why}")

    def numbers(self, ints: tuple[str, ...] = (), floats: tuple[str, ...] = ()) -> None:
        """Keys libdarknet reads for training only: checked to read the same, not used."""
        for key in ints:
            self.integer(key, 0, -INT32_MAX - 1, INT32_MAX, "an integer")
        for key in floats:
            self.number(key, 0.0)


_LAYER_COMMON_INTS = ("truth", "onlyforward", "stopbackward", "dontsave")
_LAYER_COMMON_FLOATS = ("learning_rate", "smooth")


def _net_options(opts: _Options) -> dict[str, int]:
    """``parse_net_options``: every key it reads, checked; the input size and the batch libdarknet allocates for."""
    h = opts.integer("height", None, 1, MAX_SIDE)
    w = opts.integer("width", None, 1, MAX_SIDE)
    c = opts.integer("channels", None, 1, MAX_CHANNELS)  # libdarknet's default is 0: no input
    if "inputs" in opts.sec.options:
        opts.integer("inputs", None, h * w * c, h * w * c, f"width x height x channels = {h * w * c}")
    batch = opts.integer("batch", 1, 1, INT32_MAX)
    subdivisions = opts.integer("subdivisions", 1, 1, batch, f"an integer 1..batch ({batch})")
    time_steps = opts.integer("time_steps", 1, 1, MAX_BATCH)
    effective = batch // subdivisions * time_steps
    if effective > MAX_BATCH:
        raise DarknetFormatError(
            f"{opts.where}: batch / subdivisions x time_steps = {batch} / {subdivisions} x {time_steps} = "
            f"{effective}: libdarknet allocates every layer for that batch (allowed: 1..{MAX_BATCH}; the testing "
            "cfgs say batch=1 subdivisions=1)"
        )
    policy = opts.choice("policy", "constant", POLICIES)
    steps, scales = (
        opts.ints("steps", -INT32_MAX - 1, INT32_MAX, "integers separated by commas"),
        opts.floats("scales", False),
    )
    if policy == "steps" and (steps is None or scales is None or len(steps) != len(scales)):
        raise DarknetFormatError(
            f"{opts.where}: policy=steps needs 'steps' and 'scales' with as many entries each (libdarknet reads "
            f"one scale per step, past the end of a shorter list); got {len(steps or [])} and {len(scales or [])}"
        )
    opts.numbers(
        ints=("notruth", "random", "adam", "max_crop", "min_crop", "center", "burn_in", "step", "max_batches"),
        floats=(
            "learning_rate",
            "momentum",
            "decay",
            "B1",
            "B2",
            "eps",
            "max_ratio",
            "min_ratio",
            "clip",
            "angle",
            "aspect",
            "saturation",
            "exposure",
            "hue",
            "power",
            "scale",
            "gamma",
        ),
    )
    return {"height": h, "width": w, "channels": c, "batch": effective}


def _layer_params(opts: _Options, index: int) -> dict[str, object]:
    """The typed parameters of layer ``index`` (its section's keys as libdarknet's ``parse_<type>`` reads them)."""
    kind = opts.sec.type
    opts.numbers(ints=_LAYER_COMMON_INTS, floats=_LAYER_COMMON_FLOATS)
    for key in ("dontload", "dontloadscales", "numload"):  # they change which weights libdarknet reads
        opts.integer(key, 0, 0, 0, "0 (libdarknet would read the weights file differently)")
    earlier = f"an earlier layer: -1..-{index} or 0..{index - 1}" if index else "none (layer 0 has no earlier layer)"
    if kind == "convolutional":
        size = opts.integer("size", 1, 1, MAX_KERNEL)
        pad = opts.integer("pad", 0, 0, 1, "0 or 1")
        padding = opts.integer("padding", 0, 0, size - 1, f"an integer 0..size-1 ({size - 1})")
        for key in ("binary", "xnor", "flipped"):
            opts.integer(key, 0, 0, 0, "0 (binary / xnor / flipped convolutions are not supported)")
        opts.integer("groups", 1, 1, 1, "1 (grouped convolutions are not supported)")
        opts.numbers(floats=("dot",))
        return {
            "filters": opts.integer("filters", 1, 1, MAX_FILTERS),
            "size": size,
            "stride": opts.integer("stride", 1, 1, MAX_STRIDE),
            "pad": size // 2 if pad else padding,
            "activation": opts.choice("activation", "logistic", ACTIVATIONS),
            "batch_normalize": bool(opts.integer("batch_normalize", 0, 0, 1, "0 or 1")),
        }
    if kind == "maxpool":
        stride = opts.integer("stride", 1, 1, MAX_STRIDE)
        size = opts.integer("size", stride, 1, MAX_KERNEL)  # libdarknet's default size is the stride
        padding = opts.integer("padding", size - 1, 0, size - 1, f"an integer 0..size-1 ({size - 1})")
        return {"size": size, "stride": stride, "padding": padding}
    if kind == "upsample":
        return {"stride": opts.integer("stride", 2, 1, MAX_STRIDE), "scale": opts.number("scale", 1.0)}
    if kind == "route":
        refs = opts.ints("layers", -index, index - 1, earlier)
        if not refs or not index:
            raise DarknetFormatError(f"{opts.where}: 'layers' is required (allowed: {earlier})")
        return {"layers": [r + index if r < 0 else r for r in refs]}
    if kind == "shortcut":
        frm = (
            opts.integer("from", None, -index, index - 1, earlier)
            if index
            else opts.integer("from", None, 1, 0, earlier)
        )
        opts.choice("activation", "linear", ("linear",))
        if opts.number("alpha", 1.0, 1.0, 1.0) != 1.0 or opts.number("beta", 1.0, 1.0, 1.0) != 1.0:
            raise AssertionError("unreachable: alpha and beta are range-checked to 1")
        return {"from": frm + index if frm < 0 else frm}
    if kind == "yolo":
        opts.forbid("map", "a class map file named by the cfg is not supported (libdarknet would open that path)")
        opts.numbers(ints=("max", "random"), floats=("jitter", "ignore_thresh", "truth_thresh"))
        classes = opts.integer("classes", 20, 1, MAX_FILTERS)
        total = opts.integer("num", 1, 1, MAX_FILTERS)
        mask = opts.ints("mask", 0, total - 1, f"anchor indices 0..num-1 ({total - 1}) separated by commas")
        anchors = opts.floats("anchors", True)
        if anchors is None or len(anchors) != 2 * total:
            raise DarknetFormatError(
                f"{opts.where}: 'anchors' must hold num={total} width,height pairs ({2 * total} positive numbers), "
                f"got {0 if anchors is None else len(anchors)}"
            )
        return {
            "classes": classes,
            "mask": list(range(total)) if mask is None else mask,
            "anchors": [(anchors[2 * i], anchors[2 * i + 1]) for i in range(total)],
        }
    raise DarknetFormatError(f"{opts.where}: a second [net] section")


def _required_multiple(kinds: list[str], params: list[dict[str, object]]) -> int:
    """The smallest number the input's height and width must be multiples of, so every downsampling layer divides
    its input exactly (what upsample + route pairs need): the lcm of each strided layer's cumulative stride."""
    factor: list[Fraction] = []
    multiple = 1
    for i, (kind, p) in enumerate(zip(kinds, params, strict=True)):
        before = factor[i - 1] if i else Fraction(1)
        if kind in ("convolutional", "maxpool"):
            stride = int(p["stride"])  # type: ignore[call-overload]
            if stride > 1:
                multiple = math.lcm(multiple, (before * stride).numerator)
            factor.append(before * stride)
        elif kind == "upsample":
            factor.append(before / int(p["stride"]))  # type: ignore[call-overload]
        elif kind == "route":
            factor.append(factor[p["layers"][0]])  # type: ignore[index]
        else:
            factor.append(before)
    return multiple


def plan_layers(
    sections: list[Section], path: Path | str = "<cfg>", input_hw: tuple[int, int] | None = None
) -> Network:
    """Shapes and parameters of every layer, as Darknet's ``parse_network_cfg`` computes them, every value checked
    BEFORE libdarknet sees the cfg (see :class:`_Options`; ranges: the ``MAX_*`` constants).

    ``input_hw``: (height, width) instead of the ``[net]`` section's, as ``resize_network`` runs a cfg at another
    input size (YOLO cfgs are size-agnostic: 416 and 608 are the same weights)."""
    path = Path(path)
    net = _net_options(_Options(sections[0], path, 0))
    h, w, c = net["height"], net["width"], net["channels"]
    kinds = [sec.type for sec in sections[1:]]
    params = [_layer_params(_Options(sec, path, i + 1), i) for i, sec in enumerate(sections[1:])]
    multiple = _required_multiple(kinds, params)
    sizes = [("[net] height x width", sections[0].line, h, w)]
    if input_hw is not None:
        if len(input_hw) != 2 or not all(isinstance(v, int) and 1 <= v <= MAX_SIDE for v in input_hw):
            raise DarknetFormatError(
                f"{path}: input size {list(input_hw)} must be two integers 1..{MAX_SIDE} [height, width]"
            )
        h, w = int(input_hw[0]), int(input_hw[1])
        sizes.append(("the input size", sections[0].line, h, w))
    for what, line, hh, ww in sizes:
        if hh % multiple or ww % multiple:
            raise DarknetFormatError(
                f"{path}:{line}: {what} {hh} x {ww}: both must be multiples of {multiple}, the network's total "
                f"stride (every downsampling layer must divide its input exactly for the routes to line up); "
                f"allowed: {multiple}, {2 * multiple}, ... up to {MAX_SIDE}"
            )
    shape = (c, h, w)
    layers: list[LayerPlan] = []
    activations = 0
    for index, (sec, kind, p) in enumerate(zip(sections[1:], kinds, params, strict=True)):
        where = f"{path}:{sec.line}: section {index + 1} [{kind}] (layer {index})"
        cin, hin, win = shape
        if kind == "convolutional":
            size, stride, pad, n = (int(p[k]) for k in ("size", "stride", "pad", "filters"))  # type: ignore[call-overload]
            if size > min(hin, win) + 2 * pad:
                raise DarknetFormatError(
                    f"{where}: size={size} is larger than its {hin} x {win} input plus padding {pad} (allowed: "
                    f"1..{min(hin, win) + 2 * pad})"
                )
            shape = (n, (hin + 2 * pad - size) // stride + 1, (win + 2 * pad - size) // stride + 1)
            for what, count, limit in (
                ("its kernel (channels x filters x size x size)", cin * n * size * size, MAX_LAYER_WEIGHTS),
                (
                    "its workspace (out_h x out_w x size x size x channels)",
                    shape[1] * shape[2] * size * size * cin,
                    MAX_WORKSPACE,
                ),
            ):
                if count > limit:
                    raise DarknetFormatError(f"{where}: {what} is {count:,} floats, more than the {limit:,} allowed")
        elif kind == "maxpool":
            size, stride, padding = (int(p[k]) for k in ("size", "stride", "padding"))  # type: ignore[call-overload]
            if size > min(hin, win) + padding:
                raise DarknetFormatError(
                    f"{where}: size={size} is larger than its {hin} x {win} input plus padding {padding} "
                    f"(allowed: 1..{min(hin, win) + padding})"
                )
            shape = (cin, (hin + padding - size) // stride + 1, (win + padding - size) // stride + 1)
        elif kind == "upsample":
            stride = int(p["stride"])  # type: ignore[call-overload]
            shape = (cin, hin * stride, win * stride)
        elif kind == "route":
            absolute: list[int] = p["layers"]  # type: ignore[assignment]
            shapes = [layers[r].out_shape for r in absolute]
            if any(s[1:] != shapes[0][1:] for s in shapes):
                raise DarknetFormatError(f"{where}: routed layers {absolute} have different sizes {shapes}")
            shape = (sum(s[0] for s in shapes), shapes[0][1], shapes[0][2])
        elif kind == "shortcut":
            src = int(p["from"])  # type: ignore[call-overload]
            if layers[src].out_shape != shape:
                raise DarknetFormatError(
                    f"{where}: from={src} has shape {layers[src].out_shape}, its input {shape}: they must match"
                )
        elif kind == "yolo":
            entries = len(p["mask"]) * (int(p["classes"]) + 5)  # type: ignore[arg-type, call-overload]
            if cin != entries:
                raise DarknetFormatError(
                    f"{where}: its input has {cin} channels, mask x (classes + 5) = {entries}: they must match"
                )
        outputs = shape[0] * shape[1] * shape[2]
        if outputs * net["batch"] > INT32_MAX:  # libdarknet's calloc(batch * outputs): an int product
            raise DarknetFormatError(
                f"{where}: batch {net['batch']} x its {outputs:,} outputs is more than {INT32_MAX:,} (an int in "
                "libdarknet): use a smaller input size or batch"
            )
        activations += outputs
        if activations > MAX_ACTIVATIONS:
            raise DarknetFormatError(
                f"{where}: the layers up to here output {activations:,} floats per image, more than the "
                f"{MAX_ACTIVATIONS:,} allowed (libdarknet fills several buffers of that size): use a smaller "
                "input size"
            )
        layers.append(LayerPlan(index, kind, sec.line, (cin, hin, win), shape, p))
    return Network(w, h, c, layers, path, net["batch"])


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

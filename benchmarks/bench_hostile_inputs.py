"""How fast hostile inputs are refused: the timings the unit tests no longer assert (tests check WHAT is refused
and that memory stays bounded; a wall clock is noise on a shared machine).

Everything is measured in this one run, each refusal as a ratio to loading the real Lite0 manifest once
(machines are noisy; compare the ratios, not absolute numbers), best of ``--repeat``:
- billion laughs: a 9-level alias bomb (9^9 nodes once expanded) refused by the manifest loader;
- 600 KB flow list: a manifest whose `shape:` holds 200,000 values (refused by the value count);
- 600 KB scalar: a long description, which must LOAD (libyaml, few values);
- PNG bomb: a 30000 x 30000 1-bit PNG (110 KB) refused from its header, per decoder;
- 40 MB importer file: a sparse MLModelScope YAML refused before reading.
Usage: python benchmarks/bench_hostile_inputs.py [--repeat N]
"""

from __future__ import annotations

import argparse
import itertools
import struct
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from repliscope.errors import RepliscopeError
from repliscope.manifest.loader import load_manifest

REPO = Path(__file__).resolve().parents[1]
LITE0 = REPO / "examples" / "efficientnet-lite0.yaml"
LEVELS = "abcdefghi"


def alias_bomb() -> str:
    """``a`` holds 9 strings, each next level 9 aliases of the previous one: 9^9 nodes once expanded."""
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for prev, name in itertools.pairwise(LEVELS):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def png_bomb(side: int = 30_000) -> bytes:
    """A valid side x side 1-bit grayscale PNG of zeros, written chunk by chunk (the image is never allocated)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    z = zlib.compressobj(9)
    row = bytes(1 + (side + 7) // 8)
    idat = b"".join(z.compress(row) for _ in range(side)) + z.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def best_seconds(fn: Callable[[], object], repeat: int, refused: bool) -> float:
    """Best wall time of ``repeat`` calls; ``refused``: each call must raise a RepliscopeError."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        try:
            fn()
        except RepliscopeError:
            if not refused:
                raise
        else:
            if refused:
                raise SystemExit(f"{fn} was not refused")
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from repliscope.importers.batch import import_one
    from repliscope.ops import BuildContext, build_op, decode_input

    def decode_bytes(data: bytes, library: str) -> object:
        op = build_op({"op": "decode", "library": library, "channels": "RGB"}, "pre", BuildContext(class_names=()))
        return op(decode_input(data))  # type: ignore[operator]

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bomb = root / "bomb.yaml"
        bomb.write_text(alias_bomb())
        text = LITE0.read_text()
        flow = root / "flow.yaml"
        flow.write_text(text.replace("shape: [-1, 3, 224, 224]", "shape: [" + ", ".join(["1"] * 200_000) + "]"))
        scalar = root / "scalar.yaml"
        scalar.write_text(text.replace("license: Apache-2.0", "license: '" + "a " * 300_000 + "'"))
        sparse = root / "m.yml"
        with sparse.open("wb") as fh:
            fh.truncate(40 << 20)
        png = png_bomb()

        base = best_seconds(lambda: load_manifest(LITE0), args.repeat, refused=False)
        cases: list[tuple[str, Callable[[], object], bool]] = [
            ("billion laughs", lambda: load_manifest(bomb), True),
            ("600 KB flow list", lambda: load_manifest(flow), True),
            ("600 KB scalar (loads)", lambda: load_manifest(scalar), False),
            ("40 MB importer file", lambda: import_one("mlmodelscope", sparse), True),
        ]
        cases += [
            (f"PNG bomb 30000² ({lib})", lambda lib=lib: decode_bytes(png, lib), True)  # type: ignore[misc]
            for lib in ("pillow", "opencv")
        ]
        print(f"load the Lite0 manifest: {base * 1e3:.2f} ms (the unit of the ratios below)")
        print(f"{'input':28s} {'ms':>9s} {'ratio':>8s}")
        for name, fn, refused in cases:
            seconds = best_seconds(fn, args.repeat, refused)
            print(f"{name:28s} {seconds * 1e3:9.2f} {seconds / base:8.2f}")


if __name__ == "__main__":
    main()

"""A stack matrix: EfficientNet-Lite0 on three onnxruntime versions, the same 1000 ImageNet images on each.

The Lite0 torch source is exported to ONNX once in this environment (repliscope's cached export) and written, with
its sha256, into a temporary ``framework: onnx`` manifest beside the file (pre-processing and claims unchanged), so
the stacks need no torch. Stacks (created under the repliscope cache, or reused when they exist): ``current`` (this
venv's onnxruntime), ``onnxruntime==1.20.1``, ``onnxruntime==1.18.1 numpy<2`` (1.18 is built against NumPy 1) and
``onnxruntime==1.16.3 numpy<2`` (which cannot load the IR-10 graph today's torch exports: a failed entry, with the
reason). ``run_stacks`` starts one agent process in each stack on an in-process scheduler and evaluates the samples
there one stack after the other (1 thread, the same batch size) -> the matrix: top-1 per stack, agreement and
flipped samples per pair, max / mean |delta output| over the raw logits, result-hash equality, seconds.

Usage: python benchmarks/bench_stacks.py [--limit N] [--stack SPEC ...]   (default: the three above, 1000 images)
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT.parent / "shared" / "data" / "imagenet-sample"
DEFAULT_STACKS = ("current", "onnxruntime==1.20.1", "onnxruntime==1.18.1 numpy<2", "onnxruntime==1.16.3 numpy<2")


def onnx_manifest(folder: Path) -> Path:
    """Lite0 as an ONNX-source manifest in ``folder`` (the export of this environment's torch, cached)."""
    from repliscope.evaluation.artifacts import resolve_artifact
    from repliscope.manifest.loader import load_manifest
    from repliscope.paths import default_cache_dir
    from repliscope.runtimes.onnx_export import export_to_onnx

    source = ROOT / "examples" / "efficientnet-lite0.yaml"
    loaded = load_manifest(source)
    onnx_path, _ = export_to_onnx(resolve_artifact(loaded, default_cache_dir()), default_cache_dir())
    target = folder / "efficientnet-lite0.onnx"
    shutil.copyfile(onnx_path, target)
    data = yaml.safe_load(source.read_text())
    data["name"] = "efficientnet-lite0-onnx"
    data["framework"] = {"name": "onnx", "version": ">=1.14"}
    data["source"] = {"uri": target.name, "sha256": hashlib.sha256(target.read_bytes()).hexdigest(), "format": "onnx"}
    data.pop("architecture", None)
    out = folder / "efficientnet-lite0-onnx.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--stack", action="append", default=None)
    args = parser.parse_args()
    if not SAMPLE.is_dir():
        print(f"skipped: {SAMPLE} is absent")
        return
    from repliscope.stacks.matrix import summary_rows
    from repliscope.stacks.run import run_stacks

    stacks = args.stack or list(DEFAULT_STACKS)
    with tempfile.TemporaryDirectory() as tmp:
        manifest = onnx_manifest(Path(tmp))
        t0 = time.perf_counter()
        matrix, outcomes = run_stacks(
            manifest,
            stacks,
            "onnxruntime",
            str(SAMPLE),
            limit=args.limit,
            label_rule="imagenet_wnid",
            threads=1,
            log=lambda line: print(f"  {line}", file=sys.stderr),
        )
        wall = time.perf_counter() - t0
    print(
        f"stack matrix {matrix.matrix_id[:12]}: {matrix.manifest.name} on {matrix.dataset.n} images, "
        f"{len(matrix.stacks)} stacks, {wall:.0f} s in all"
    )
    for row in summary_rows(matrix):
        print("  " + "  ".join(f"{k}={v}" for k, v in row.items()))
    for pair in matrix.pairs:
        print(
            f"  {pair.a} vs {pair.b}: agreement {pair.agreement}, flips {len(pair.flips_ab)}/{len(pair.flips_ba)}"
            f", max |d output| {pair.max_abs_output_diff}, mean {pair.mean_abs_output_diff}, "
            f"hash equal {pair.result_hash_equal}"
        )
    for entry in matrix.stacks:
        if entry.error:
            print(f"  {entry.key} ({entry.spec}) could not run the job: {entry.error}")
    assert all(len(o.records) == 1 for o in outcomes)


if __name__ == "__main__":
    main()

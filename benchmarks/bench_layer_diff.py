"""Benchmark: layer-level GOLDEN diff of EfficientNet-Lite0, torch vs onnxruntime, batch 8 real images.

    .venv/bin/python benchmarks/bench_layer_diff.py [--threads 2] [--batch 8]

Prints wall time and peak memory of the diff and of ONE forward pass of each side, measured in the same run,
and their ratios. Each measurement runs in a fresh subprocess that first imports the same libraries
(torch, onnxruntime, onnx, repliscope.diff) and pre-processes the batch, then resets the kernel's peak-RSS
counter (``/proc/self/clear_refs`` <- 5) and records ``VmRSS``; the figure reported is the growth of
``VmHWM`` (peak resident set) above that baseline, which sees torch's and onnxruntime's native allocations
(tracemalloc would not). Each subprocess's work includes loading its model: the torch forward builds the
module and runs it; the onnxruntime forward creates the session and runs it; the diff builds the reference
and the ONNX candidate (one small session per unit) and runs golden mode at op granularity (module layers AND
the functional ops of ``forward``: residual adds, the flatten), then compares the final output (one more
unit-by-unit forward of the candidate). ``--ops off`` measures the module-only diff for comparison. The ONNX
export is created
beforehand (it is cached, as in real use). Targets (issue 4): wall <= 10 s, peak <= 2 x the forward pass.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "examples" / "efficientnet-lite0.yaml"


def _status(field: str) -> int:
    """A /proc/self/status field in bytes (e.g. VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _measure(what: str, threads: int, batch: int, ops: bool = True) -> dict[str, Any]:
    import numpy as np
    import onnx  # noqa: F401  (same imports in every measurement)
    import onnxruntime as ort
    import torch

    from repliscope.backends.onnxruntime.candidate import OnnxCandidate
    from repliscope.backends.torch.loader import build_torch_module
    from repliscope.datasets import resolve_dataset
    from repliscope.diff.layers.driver import diff_layers
    from repliscope.diff.layers.torch_reference import TorchReference
    from repliscope.diff.task_level import first_batch
    from repliscope.evaluation.run import RunSettings, prepare
    from repliscope.paths import default_cache_dir
    from repliscope.runtimes.onnx_export import export_to_onnx

    torch.set_num_threads(threads)
    prepared = prepare(MANIFEST, RunSettings(runtime="torch", threads=threads, batch_size=batch))
    _, x = first_batch(
        prepared.pipeline, resolve_dataset("foolbox_imagenet"), batch, tuple(prepared.artifact.input_shape[1:])
    )
    onnx_path, _ = export_to_onnx(prepared.artifact, default_cache_dir())
    Path("/proc/self/clear_refs").write_text("5")
    base = _status("VmRSS")
    out: dict[str, Any] = {"what": what}
    start = time.perf_counter()
    if what == "torch":
        module = build_torch_module(prepared.artifact)
        t = time.perf_counter()
        with torch.inference_mode():
            module(torch.from_numpy(x))
        out["forward_seconds"] = time.perf_counter() - t
        t = time.perf_counter()
        with torch.inference_mode():
            module(torch.from_numpy(x))
        out["warm_forward_seconds"] = time.perf_counter() - t
    elif what == "onnxruntime":
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(onnx_path), sess_options=options, providers=["CPUExecutionProvider"])
        t = time.perf_counter()
        session.run(None, {"input": x})
        out["forward_seconds"] = time.perf_counter() - t
        t = time.perf_counter()
        session.run(None, {"input": x})
        out["warm_forward_seconds"] = time.perf_counter() - t
    else:
        reference = TorchReference(TorchReference.from_artifact(prepared.artifact).module, ops=ops)
        candidate = OnnxCandidate(onnx_path, threads=threads)
        result = diff_layers(reference, candidate, x, modes=["golden"])
        assert result.passed, (result.first_divergent, result.output)
        golden = result.summary["golden"]
        out["compared_layers"] = golden.compared
        out["compared_ops"] = golden.ops
        out["reference_units"] = golden.reference_units
        out["uncompared"] = len(result.uncompared)
        out["output_max_abs"] = result.output.max_abs if result.output is not None else None
        out["diff_seconds"] = result.seconds
    out["wall_seconds"] = time.perf_counter() - start
    out["peak_bytes"] = _status("VmHWM") - base
    out["baseline_bytes"] = base
    np.asarray(0)
    return out


def _run(what: str, threads: int, batch: int, ops: bool = True) -> dict[str, Any]:
    proc = subprocess.run(
        [
            sys.executable,
            __file__,
            "--measure",
            what,
            "--threads",
            str(threads),
            "--batch",
            str(batch),
            "--ops",
            "on" if ops else "off",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    if proc.returncode != 0:
        raise SystemExit(f"measurement '{what}' failed:\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--measure", choices=["torch", "onnxruntime", "diff"])
    parser.add_argument(
        "--ops",
        choices=["on", "off"],
        default="on",
        help="op-level granularity (functional ops are units) or module layers only",
    )
    args = parser.parse_args()
    ops = args.ops == "on"
    if args.measure:
        print(json.dumps(_measure(args.measure, args.threads, args.batch, ops)))
        return
    _run("torch", args.threads, args.batch)  # warm the export cache and the file cache, not reported
    res = {w: _run(w, args.threads, args.batch, ops) for w in ("torch", "onnxruntime", "diff")}
    mib = 1024 * 1024
    t, o, d = res["torch"], res["onnxruntime"], res["diff"]
    print(
        f"layer-level golden diff, EfficientNet-Lite0, torch vs onnxruntime, batch {args.batch} real images, "
        f"{args.threads} threads, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"  granularity              {'op level (module layers + functional ops)' if ops else 'module layers only'}")
    print(
        f"  compared units           {d['compared_layers']} ({d['compared_ops']} functional ops), covering "
        f"{d['reference_units']} reference units; {d['uncompared']} not compared; final output max |err| "
        f"{d['output_max_abs']:.3g}"
    )
    print(
        f"  diff wall time           {d['wall_seconds']:.2f} s  (of which the diff itself {d['diff_seconds']:.2f} s;"
        f" the rest builds the torch module and loads the ONNX model)"
    )
    print(
        f"  time per compared unit   {1000 * d['diff_seconds'] / d['compared_layers']:.1f} ms (diff itself), "
        f"{1000 * d['wall_seconds'] / d['compared_layers']:.1f} ms (wall)"
    )
    print(
        f"  torch forward            {t['forward_seconds']:.3f} s cold, {t['warm_forward_seconds']:.3f} s warm; "
        f"with model build {t['wall_seconds']:.2f} s"
    )
    print(
        f"  onnxruntime forward      {o['forward_seconds']:.3f} s cold, {o['warm_forward_seconds']:.3f} s warm; "
        f"with session creation {o['wall_seconds']:.2f} s"
    )
    print(f"  wall ratio diff / torch forward (cold)        {d['wall_seconds'] / t['forward_seconds']:.1f}x")
    print(f"  wall ratio diff / onnxruntime forward (cold)  {d['wall_seconds'] / o['forward_seconds']:.1f}x")
    print(
        f"  wall ratio diff / (torch + onnxruntime, with loading) "
        f"{d['wall_seconds'] / (t['wall_seconds'] + o['wall_seconds']):.1f}x"
    )
    print(
        f"  peak memory above baseline: diff {d['peak_bytes'] / mib:.0f} MiB, torch forward "
        f"{t['peak_bytes'] / mib:.0f} MiB, onnxruntime forward {o['peak_bytes'] / mib:.0f} MiB "
        f"(baseline after imports ~{d['baseline_bytes'] / mib:.0f} MiB)"
    )
    print(f"  memory ratio diff / torch forward            {d['peak_bytes'] / t['peak_bytes']:.2f}x")
    print(f"  memory ratio diff / onnxruntime forward      {d['peak_bytes'] / o['peak_bytes']:.2f}x")
    both = t["peak_bytes"] + o["peak_bytes"]
    print(f"  memory ratio diff / (torch + onnxruntime)    {d['peak_bytes'] / both:.2f}x")
    ok_wall = d["wall_seconds"] <= 10
    ok_mem = d["peak_bytes"] <= 2 * max(t["peak_bytes"], o["peak_bytes"])
    print(
        f"  targets: wall <= 10 s {'met' if ok_wall else 'MISSED'}; peak <= 2 x the larger forward pass "
        f"{'met' if ok_mem else 'MISSED'}"
    )


if __name__ == "__main__":
    main()

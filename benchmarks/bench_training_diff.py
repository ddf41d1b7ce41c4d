"""Training-step diff cost with YOLOv3-tiny (``examples/yolov3-tiny.yaml``; ``make yolo-assets``, ``make darknet``):
``K`` steps (default 5) of libdarknet's own ``train_network`` on dog.jpg (batch 1) — the original's own cost, the
unit of the ratios — against the whole training-step diff of repliscope's Keras port (the port's steps, Darknet's
yolo layer on the port's outputs, the comparison), and the gradient diff at the starting weights, each as a ratio
to Darknet's own K steps, measured in this run. Prints the machine load before and after.

With ``--tfmg``, also the gradient diff of the TF Model Garden's own YOLOv3-tiny (``--gradients tfmg-yolov3-tiny``:
one crossing to its stack, ``make loss-stacks``, both batch-norm modes; TensorFlow's start and the model builds
included), as a ratio to the same unit.

Usage: python benchmarks/bench_training_diff.py [--steps 5] [--tfmg]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--tfmg", action="store_true", help="also the Model Garden's model, in its stack")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.diff.training._fixtures import DOG_TRUTH
    from tests.yolo._assets import DARKNET_DATA, cfg_path, weights_path

    from repliscope.backends.darknet import reference as ref
    from repliscope.backends.darknet.training import DarknetTrainer
    from repliscope.diff.training.batches import stack
    from repliscope.diff.training.gradients import run_gradient_diff
    from repliscope.diff.training.port import load_port, yardstick
    from repliscope.diff.training.steps import run_training_diff

    print(f"load average before: {os.getloadavg()}")
    batch = stack([("dog", ref.letterbox(DARKNET_DATA / "dog.jpg", 416, 416), DOG_TRUTH)])
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with DarknetTrainer(cfg_path(), weights_path(), batch=1, workdir=work) as own:
            t0 = time.perf_counter()
            for _ in range(args.steps):
                own.train_step(batch.x, batch.truth)
            darknet_s = time.perf_counter() - t0
        print(f"libdarknet train_network, {args.steps} steps: {darknet_s:.2f} s = 1.00")
        trainer = DarknetTrainer(cfg_path(), weights_path(), batch=1, workdir=work)
        oracle = DarknetTrainer(cfg_path(), weights_path(), batch=1, workdir=work)
        values = trainer.params()
        t0 = time.perf_counter()
        port = load_port("darknet-keras", trainer.network, values)
        gradient = run_gradient_diff(trainer, port, batch.x, batch.truth, yardstick=yardstick(trainer.network, values))
        grad_s = time.perf_counter() - t0
        print(f"gradient diff (port built, yardstick included): {grad_s:.2f} s = {grad_s / darknet_s:.2f}")
        t0 = time.perf_counter()
        result = run_training_diff(trainer, oracle, port, [batch], steps=args.steps, gradient=gradient)
        steps_s = time.perf_counter() - t0
        print(f"training-step diff, {args.steps} steps: {steps_s:.2f} s = {steps_s / darknet_s:.2f} ({result.summary})")
        if args.tfmg:
            from repliscope.diff.training.tfmg_port import BN_MODES, tfmg_ports
            from repliscope.stacks.call import run_task

            fresh = DarknetTrainer(cfg_path(), weights_path(), batch=1, workdir=work)  # the steps moved `trainer`
            ys = yardstick(fresh.network, values)
            t0 = time.perf_counter()
            ports = tfmg_ports(fresh.network, cfg_path(), weights_path(), BN_MODES, run_task, work)
            for bn, tfmg in ports.items():
                r = run_gradient_diff(fresh, tfmg, batch.x, batch.truth, yardstick=ys)
                print(f"  the Model Garden's model, {bn}: {r.summary}")
            tfmg_s = time.perf_counter() - t0
            print(f"gradient diff of the Model Garden's model (one crossing, 2 modes): {tfmg_s:.2f} s = "
                  f"{tfmg_s / darknet_s:.2f}")  # fmt: skip
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()

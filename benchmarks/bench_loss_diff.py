"""Loss diff cost on coco-val-mini (``../shared/data/coco-val-mini``, 158 images) with YOLOv3-tiny
(``examples/yolov3-tiny.yaml``; ``make yolo-assets``, ``make darknet``):

- the network outputs (libdarknet on libdarknet's letterboxed images, the tensors entering the yolo layers): built
  once and shared by every row, timed apart;
- ``darknet_yolo`` (libdarknet's ``forward_yolo_layer``) alone: the original's own cost, the unit of the ratios;
- the whole loss diff (:func:`repliscope.diff.loss.driver.run_loss_diff`: both losses, the comparison, the
  diagnosis) of the numpy YOLOv3 candidate of the tests and of a one-mistake torch candidate (the diagnosis
  searches every registered pitfall; the torch candidate, Python loops of small tensor ops, runs on the first
  ``--mistake-limit`` images), each as a ratio to ``darknet_yolo``'s cost on the same images, the comparison and
  diagnosis apart from the two losses;
- with ``--tfmg``: the TF Model Garden's ``tfmg_yolo`` in its provisioned stack (``make loss-stacks``) against
  ``darknet_yolo`` on the same images, its time as a ratio to ``darknet_yolo``'s.

Prints the machine load before and after.
Usage: python benchmarks/bench_loss_diff.py [--limit 158] [--mistake-limit 16] [--tfmg]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COCO = ROOT.parent / "shared" / "data" / "coco-val-mini"
MANIFEST = ROOT / "examples" / "yolov3-tiny.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=158)
    parser.add_argument("--tfmg", action="store_true", help="also tfmg_yolo in its stack (make loss-stacks)")
    parser.add_argument("--mistake-limit", type=int, default=16, help="images of the (slow) torch candidate's row")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.diff.loss.candidates import YoloV3Torch, yolov3_numpy

    from repliscope.backends.darknet.loss import darknet_yolo_loss
    from repliscope.diff.loss.contract import LOSSES
    from repliscope.diff.loss.driver import run_loss_diff
    from repliscope.diff.loss.sources import darknet_inputs, load_yolo_model

    print(f"load average before: {os.getloadavg()}")
    model, _ = load_yolo_model(str(MANIFEST))
    t0 = time.perf_counter()
    prepared = darknet_inputs(model, f"coco:{COCO}", args.limit)
    outputs_s = time.perf_counter() - t0
    inputs = prepared.inputs
    n = len(inputs.targets)
    print(f"{n} images; network outputs (libdarknet): {outputs_s:.1f} s ({outputs_s / n:.3f} s/image)")
    darknet_yolo_loss(inputs)  # warm: the one-layer networks are parsed once
    t0 = time.perf_counter()
    darknet_yolo_loss(inputs)
    own = time.perf_counter() - t0
    print(f"darknet_yolo alone: {own:.3f} s ({1000 * own / n:.2f} ms/image) = 1.00")
    spec = LOSSES.get("darknet_yolo")
    from repliscope.diff.loss.contract import LossInputs

    few = LossInputs(
        "yolo", {k: v[: args.mistake_limit] for k, v in inputs.outputs.items()}, inputs.targets[: args.mistake_limit],
        inputs.config,
    )  # fmt: skip
    for label, candidate, rows in (
        ("numpy YOLOv3 (tests)", yolov3_numpy, inputs),
        ("torch, reduction='mean'", YoloV3Torch(reduction="mean"), few),
    ):
        t0 = time.perf_counter()
        darknet_yolo_loss(rows)
        own_rows = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = run_loss_diff(rows, spec, darknet_yolo_loss, label, candidate, source="dataset")
        whole = time.perf_counter() - t0
        rest = whole - result.seconds["original"] - result.seconds["candidate"]
        named = result.diagnosis.pitfall if result.diagnosis else None
        print(
            f"loss diff, {label}, {len(rows.targets)} images: {whole:.2f} s = {whole / own_rows:.1f} x darknet_yolo "
            f"on them (candidate {result.seconds['candidate']:.2f} s; comparison and diagnosis {rest:.2f} s = "
            f"{rest / own_rows:.1f} x); passed {result.passed}, first divergent {result.first_divergent}, "
            f"pitfall {named}"
        )
    if args.tfmg:
        from repliscope.stacks.call import run_loss

        tfmg = LOSSES.get("tfmg_yolo")
        t0 = time.perf_counter()
        result = run_loss_diff(
            inputs, tfmg, lambda x: run_loss(tfmg, x), "darknet_yolo", darknet_yolo_loss, source="dataset"
        )
        whole = time.perf_counter() - t0
        print(
            f"tfmg_yolo (its stack) vs darknet_yolo: tfmg_yolo {result.seconds['original']:.2f} s = "
            f"{result.seconds['original'] / own:.1f} x darknet_yolo; whole diff {whole:.2f} s; first divergent "
            f"{result.first_divergent}; total {result.total.original:.4g} (tfmg, batch mean) vs "
            f"{result.total.candidate:.6g} (darknet, sum)"
        )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()

"""The network outputs and targets a loss diff feeds both losses (:class:`~repliscope.diff.loss.contract.LossInputs`)
for a Darknet YOLO manifest:

- :func:`darknet_inputs`: the model's REAL raw outputs on real images. Each image is decoded and letterboxed by
  libdarknet itself (``load_image_color`` + ``letterbox_image``, the input of ``detector valid``), run by
  libdarknet (``network_predict``), and the tensor ENTERING each yolo layer (the output of the layer before it,
  before the yolo layer's logistic) is kept. Targets are the dataset's boxes (COCO: crowd regions left out) in
  the letterboxed input's normalised cx, cy, w, h (Darknet's truth convention), classes through the manifest's
  ``class_map`` (``coco80_to_91``: COCO's 91 ids back to Darknet's 80); at most ``max_boxes`` (90) per image.
- :func:`random_inputs`: seeded random outputs (float32 normal(0, 1)) of the same shapes and seeded random boxes
  (1 to 4 per image, centres uniform in (0.05, 0.95), sizes log-uniform in (0.02, 0.6)).

The loss ``config`` comes from the cfg: every yolo layer's ``mask``, the ``anchors``, ``classes``,
``ignore_thresh`` (default .5) and ``truth_thresh`` (default 1), and the network input size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.convert.darknet_cfg import Network, load_network_cfg, read_cfg
from repliscope.diff.loss.contract import ImageTargets, LossInputs
from repliscope.errors import RepliscopeError

MAX_BOXES = 90


@dataclass(frozen=True)
class YoloModel:
    """What a loss diff needs of a Darknet YOLO manifest."""

    cfg: Path
    weights: Path
    network: Network
    config: dict[str, Any]
    yolo_layers: tuple[str, ...]
    class_table: dict[int, int] | None
    """Dataset class id -> the network's class index (None: the same ids)."""


def yolo_config(cfg: Path, network: Network) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The contract's yolo ``config`` from a Darknet cfg, and the yolo layers' names."""
    sections = [s for s in read_cfg(cfg) if s.type != "net"]
    yolo = [lay for lay in network.layers if lay.type == "yolo"]
    if not yolo:
        raise RepliscopeError(f"{cfg}: no [yolo] layer: the loss diff compares YOLO losses")
    first = yolo[0].params
    thresholds: set[tuple[float, float]] = set()
    for lay in yolo:
        if lay.params["anchors"] != first["anchors"] or lay.params["classes"] != first["classes"]:
            raise RepliscopeError(f"{cfg}: the yolo layers have different anchors or classes (line {lay.line})")
        opts = sections[lay.index].options
        thresholds.add((float(opts.get("ignore_thresh", 0.5)), float(opts.get("truth_thresh", 1.0))))
    if len(thresholds) != 1:
        raise RepliscopeError(
            f"{cfg}: the yolo layers have different ignore_thresh / truth_thresh: {sorted(thresholds)}"
        )
    ignore, truth = thresholds.pop()
    config = {
        "anchors": [tuple(a) for a in first["anchors"]],  # type: ignore[attr-defined]
        "mask": {lay.name: list(lay.params["mask"]) for lay in yolo},  # type: ignore[call-overload]
        "classes": int(first["classes"]),  # type: ignore[call-overload]
        "ignore_thresh": ignore,
        "truth_thresh": truth,
        "net_w": network.width,
        "net_h": network.height,
    }
    return config, tuple(lay.name for lay in yolo)


def load_yolo_model(manifest: str) -> tuple[YoloModel, str]:
    """The Darknet model of ``manifest`` (its cfg and weights, checked and cached) -> (model, manifest name)."""
    from repliscope.convert.darknet_cfg import artifact_size
    from repliscope.evaluation.artifacts import resolve_artifact
    from repliscope.manifest.loader import load_manifest
    from repliscope.ops.detection.class_map import COCO91_TO_80
    from repliscope.paths import default_cache_dir

    if not Path(manifest).is_file():
        raise RepliscopeError(f"'{manifest}' is not a manifest file")
    loaded = load_manifest(manifest)
    artifact = resolve_artifact(loaded, default_cache_dir())
    if artifact.format != "darknet" or artifact.config_path is None:
        raise RepliscopeError(
            f"{manifest}: the loss diff reads the YOLO loss settings from a Darknet cfg (source.format darknet "
            f"with source.config); this manifest's source is {artifact.format}"
        )
    cfg = Path(artifact.config_path)
    network = load_network_cfg(cfg, artifact_size(artifact))
    config, layers = yolo_config(cfg, network)
    table = None
    for op in loaded.manifest.postprocess:
        if op.get("op") == "class_map" and op.get("table") == "coco80_to_91":
            table = dict(COCO91_TO_80)
    model = YoloModel(cfg, Path(artifact.path), network, config, layers, table)
    return model, loaded.manifest.name


def _letterboxed_box(box: Sequence[float], width: int, height: int, net_w: int, net_h: int) -> tuple[float, ...]:
    from repliscope.ops.darknet.letterbox import letterbox_size

    new_w, new_h = letterbox_size(width, height, net_w, net_h)
    left, top = (net_w - new_w) // 2, (net_h - new_h) // 2
    x0, y0, x1, y1 = (max(0.0, min(float(v), lim)) for v, lim in zip(box, (width, height, width, height), strict=True))
    sx, sy = new_w / width, new_h / height
    bx0, bx1 = (left + x0 * sx) / net_w, (left + x1 * sx) / net_w
    by0, by1 = (top + y0 * sy) / net_h, (top + y1 * sy) / net_h
    return ((bx0 + bx1) / 2, (by0 + by1) / 2, bx1 - bx0, by1 - by0)


@dataclass
class Prepared:
    inputs: LossInputs
    notes: list[str]
    failed: list[dict[str, str]]


def darknet_inputs(
    model: YoloModel,
    dataset: str,
    limit: int | None,
    *,
    threads: int = 2,
    on_image: Callable[[], None] | None = None,
) -> Prepared:
    """Real raw outputs of ``model`` on the first ``limit`` images of ``dataset`` and their boxes."""
    from repliscope.backends.darknet.augment import load_image
    from repliscope.backends.darknet.reference import layer_sources, letterbox_array
    from repliscope.backends.darknet.runner import DarknetRunner
    from repliscope.datasets import resolve_dataset
    from repliscope.datasets.base import read_sample
    from repliscope.runtimes.base import ModelArtifact

    data = resolve_dataset(dataset)
    samples = list(data.samples[:limit] if limit else data.samples)
    if not samples:
        raise RepliscopeError(f"dataset '{dataset}' has no sample")
    if all(s.objects is None for s in samples):
        raise RepliscopeError(f"dataset '{dataset}' has no boxes: the loss diff needs a detection dataset (COCO)")
    net = model.network
    artifact = ModelArtifact(
        path=model.weights,
        sha256="",
        format="darknet",
        input_name="data",
        input_shape=(-1, 3, net.height, net.width),
        input_dtype="float32",
        config_path=model.cfg,
    )
    runner = DarknetRunner(artifact, threads=threads, cache_dir=Path("."))
    feeds = {name: net.layers[layer_sources(net.layer(name))[0]].name for name in model.yolo_layers}
    rows: dict[str, list[np.ndarray]] = {name: [] for name in model.yolo_layers}
    targets: list[ImageTargets] = []
    notes: list[str] = []
    failed: list[dict[str, str]] = []
    classes = int(model.config["classes"])
    for smp in samples:
        read = read_sample(smp)
        if read.data is None:
            failed.append({"sample": smp.id, "error": read.fingerprint})
            continue
        try:
            hwc = load_image(read.data, Path(smp.location or smp.id).suffix or ".jpg")
        except ValueError as exc:
            failed.append({"sample": smp.id, "error": str(exc)})
            continue
        h, w = hwc.shape[:2]
        x = letterbox_array(np.ascontiguousarray(hwc.transpose(2, 0, 1)), net.width, net.height)
        boxes, labels = [], []
        for obj in smp.objects or ():
            if obj.iscrowd:
                continue
            cls = model.class_table.get(obj.class_id) if model.class_table is not None else obj.class_id
            if cls is None or not 0 <= cls < classes:
                raise RepliscopeError(
                    f"sample {smp.id}: class id {obj.class_id} has no class of the model's {classes} (class_map of "
                    "the manifest)"
                )
            cx, cy, bw, bh = _letterboxed_box(obj.box, w, h, net.width, net.height)
            if bw <= 0 or bh <= 0:
                continue
            boxes.append((cx, cy, bw, bh))
            labels.append(cls)
        if len(boxes) > MAX_BOXES:
            notes.append(f"sample {smp.id}: {len(boxes)} boxes, the first {MAX_BOXES} kept (Darknet's max_boxes)")
            boxes, labels = boxes[:MAX_BOXES], labels[:MAX_BOXES]
        layer_out = runner.layer_outputs(x)
        for name in model.yolo_layers:
            rows[name].append(layer_out[feeds[name]])
        targets.append(ImageTargets(smp.id, np.asarray(boxes, np.float32).reshape(-1, 4), np.asarray(labels, np.int64)))
        if on_image is not None:
            on_image()
    if not targets:
        raise RepliscopeError(f"no sample of '{dataset}' could be decoded ({failed[0]['error']})")
    outputs = {name: np.stack(v).astype(np.float32) for name, v in rows.items()}
    notes.append(
        "outputs: the tensors entering the yolo layers (" + ", ".join(f"{k} <- {v}" for k, v in feeds.items()) + ") "
        "from libdarknet on libdarknet's letterboxed images"
    )
    return Prepared(LossInputs("yolo", outputs, tuple(targets), model.config), notes, failed)


def random_inputs(model: YoloModel, seed: int, images: int) -> Prepared:
    """Seeded random outputs of ``model``'s yolo layers' shapes and seeded random boxes, ``images`` images."""
    rng = np.random.default_rng(seed)
    net = model.network
    outputs = {}
    for name in model.yolo_layers:
        c, h, w = net.layer(name).in_shape
        outputs[name] = rng.standard_normal((images, c, h, w), dtype=np.float32)
    classes = int(model.config["classes"])
    targets = []
    for n in range(images):
        k = int(rng.integers(1, 5))
        centres = rng.uniform(0.05, 0.95, (k, 2))
        sizes = np.exp(rng.uniform(np.log(0.02), np.log(0.6), (k, 2)))
        boxes = np.concatenate([centres, sizes], 1).astype(np.float32)
        targets.append(ImageTargets(f"random-{n}", boxes, rng.integers(0, classes, k).astype(np.int64)))
    note = f"outputs: seeded random normal(0, 1) float32 (numpy default_rng({seed})), boxes: 1-4 random per image"
    return Prepared(LossInputs("yolo", outputs, tuple(targets), model.config), [note], [])

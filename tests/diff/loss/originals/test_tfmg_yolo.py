"""``tfmg_yolo``: the Model Garden's own YoloLoss (tf-models-official 2.20.0) in its stack, pinned against a numpy
derivation of what its DarknetLoss computes, and the adapter's parts (Darknet's target assignment, the ground-truth
tensors, the sha256-pinned source tree) without the stack.

The stack tests (``slow``, ``stack``, ``network``) build the stack on first use (``make loss-stacks`` builds it once;
about 40 s and 2.5 GB from an empty pip cache) and reuse it from the stack cache afterwards.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from repliscope.diff.loss.contract import LOSSES, ImageTargets, LossInputs, LossResult
from repliscope.diff.loss.originals import tfmg_yolo
from repliscope.diff.loss.originals.tfmg_yolo import darknet_assignment, ground_truth, layer_settings
from repliscope.errors import SourceError
from repliscope.paths import default_cache_dir

REAL_CACHE = default_cache_dir()
"""The stack and source cache of this machine (read at import: the autouse fixture points REPLISCOPE_CACHE at a
temporary folder during each test)."""

ANCHORS = [(10, 14), (23, 27), (37, 58), (81, 82), (135, 169), (344, 319)]
MASK = {"yolo_16": [3, 4, 5], "yolo_23": [0, 1, 2]}
CLASSES = 3
CONFIG = {
    "anchors": ANCHORS,
    "mask": MASK,
    "classes": CLASSES,
    "ignore_thresh": 0.7,
    "truth_thresh": 1.0,
    "net_w": 416,
    "net_h": 416,
}
GRIDS = {"yolo_16": 13, "yolo_23": 26}
STRIDE = 5 + CLASSES


def _ch(anchor: int, k: int) -> int:
    return anchor * STRIDE + k


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


def _inputs() -> LossInputs:
    """Two images, four truths over both layers; image 0 has two planted predictions on its first truth's cell:
    anchor 0 of yolo_16 predicts that truth's box (IoU 0.95) with a high class probability (ignored by the Model
    Garden), and anchor 1 predicts it with every class probability below 0.25 (not ignored by the Model Garden:
    Darknet ignores both)."""
    rng = np.random.default_rng(34)
    outputs = {name: rng.normal(0.0, 1.0, (2, 3 * STRIDE, g, g)).astype(np.float32) for name, g in GRIDS.items()}
    boxes_a = np.array([[0.5, 0.5, 0.62, 0.7], [0.23, 0.31, 0.06, 0.08], [0.71, 0.66, 0.2, 0.18]], np.float32)
    boxes_b = np.array([[0.4, 0.6, 0.09, 0.12]], np.float32)
    o = outputs["yolo_16"]
    for anchor, class_logit in ((0, 4.0), (1, -4.0)):
        aw, ah = ANCHORS[MASK["yolo_16"][anchor]]
        o[0, _ch(anchor, 0), 6, 6] = 0.0  # sigmoid 0.5: centre (6.5 / 13) = 0.5
        o[0, _ch(anchor, 1), 6, 6] = 0.0
        o[0, _ch(anchor, 2), 6, 6] = np.log(0.62 * 416 / aw) + 0.05  # IoU 0.95: above ignore_thresh, below 1
        o[0, _ch(anchor, 3), 6, 6] = np.log(0.7 * 416 / ah)
        o[0, _ch(anchor, 5) : _ch(anchor, 5) + CLASSES, 6, 6] = class_logit
    return LossInputs(
        family="yolo",
        outputs=outputs,
        targets=(
            ImageTargets("a", boxes_a, np.array([1, 0, 2], np.int64)),
            ImageTargets("b", boxes_b, np.array([2], np.int64)),
        ),
        config=CONFIG,
    )


# -- the adapter, without the stack -------------------------------------------------------------------------------


def test_targets_go_to_the_anchor_darknet_picks_over_all_anchors() -> None:
    boxes = np.array([[0.5, 0.5, 0.62, 0.7], [0.23, 0.31, 0.06, 0.08], [0.5, 0.5, 37 / 416, 58 / 416]], np.float32)
    assert darknet_assignment(boxes, ANCHORS, 416, 416).tolist() == [5, 1, 2]
    # equal IoU with two anchors: the first wins (Darknet's strict '>')
    twins = [(20, 20), (20, 20)]
    assert darknet_assignment(np.array([[0.5, 0.5, 0.1, 0.1]], np.float32), twins, 416, 416).tolist() == [0]


def test_ground_truth_is_the_model_gardens_layout() -> None:
    layers = layer_settings(CONFIG, ["yolo_16", "yolo_23"])
    boxes = np.array([[0.5, 0.5, 0.62, 0.7], [0.23, 0.31, 0.06, 0.08]], np.float32)
    truth = ground_truth(boxes, np.array([1, 0]), layers, {"yolo_16": (13, 13), "yolo_23": (26, 26)}, CONFIG)
    assert truth["inds"]["yolo_16"].tolist() == [[[6, 6, 2]]]  # (y, x, anchor within the mask)
    np.testing.assert_array_equal(truth["upds"]["yolo_16"], np.array([[[0.5, 0.5, 0.62, 0.7, 1.0, 1.0]]], np.float32))
    assert truth["inds"]["yolo_23"].tolist() == [[[8, 5, 1]]]  # int(0.31 * 26), int(0.23 * 26); anchor 1
    assert truth["true_conf"]["yolo_23"].shape == (1, 26, 26, 3, 1)
    assert truth["true_conf"]["yolo_23"].sum() == 1.0 and truth["true_conf"]["yolo_23"][0, 8, 5, 1, 0] == 1.0
    # the ignore search's truths: yxyx, padded with zero boxes to whole 50-box tiles plus one
    assert truth["bbox"].shape == (1, 100, 4)
    np.testing.assert_allclose(truth["bbox"][0, 0], [0.15, 0.19, 0.85, 0.81], atol=1e-7)
    assert not truth["bbox"][0, 2:].any() and truth["classes"][0, :2].tolist() == [1.0, 0.0]


def test_a_layer_the_cfg_does_not_describe_is_named() -> None:
    with pytest.raises(ValueError, match=r"config\['mask'\] has no entry for the output 'yolo_30'"):
        layer_settings(CONFIG, ["yolo_30"])
    with pytest.raises(ValueError, match="config has no 'ignore_thresh'"):
        layer_settings({k: v for k, v in CONFIG.items() if k != "ignore_thresh"}, ["yolo_16"])


def _wheel(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _serve(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    """fetch_archive hands over ``data`` as the wheel (no index is read)."""

    def fetch(kind: str, dist: str, version: str, into: Path, config: object = None) -> Path:
        assert (kind, dist, version) == ("wheel", "tf-models-official", "2.20.0")
        path = into / tfmg_yolo.WHEEL_FILE
        path.write_bytes(data)
        return path

    monkeypatch.setattr("repliscope.manifest.package_index.fetch_archive", fetch)


def test_the_source_tree_is_the_pinned_wheels_official_and_orbit_folders_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = _wheel(
        {
            "official/__init__.py": b"",
            "official/projects/yolo/x.py": b"X = 1\n",
            "orbit/y.py": b"Y = 2\n",
            "tensorflow_models/z.py": b"Z = 3\n",
        }
    )
    _serve(monkeypatch, data)
    monkeypatch.setattr(tfmg_yolo, "WHEEL_SHA256", hashlib.sha256(data).hexdigest())
    folder = tfmg_yolo.official_tree(tmp_path)
    assert (folder / "official" / "projects" / "yolo" / "x.py").read_text() == "X = 1\n"
    assert (folder / "orbit" / "y.py").read_text() == "Y = 2\n"  # the Model Garden's models import orbit
    assert not (folder / "tensorflow_models").exists()
    assert tfmg_yolo.official_tree(tmp_path) == folder  # cached: the marker holds the pinned sha256


def test_a_wheel_with_another_sha256_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _serve(monkeypatch, _wheel({"official/__init__.py": b"import os; os.system('touch pwned')\n"}))
    with pytest.raises(SourceError, match=f"but tfmg_yolo is pinned to {tfmg_yolo.WHEEL_SHA256}"):
        tfmg_yolo.official_tree(tmp_path)
    assert not list((tmp_path / "originals").glob("tf-models-official-*"))


def test_a_member_leaving_the_official_folder_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    data = _wheel({"official/../../escaped.py": b"X = 1\n"})
    _serve(monkeypatch, data)
    monkeypatch.setattr(tfmg_yolo, "WHEEL_SHA256", hashlib.sha256(data).hexdigest())
    with pytest.raises(SourceError, match="leaves the official/ folder"):
        tfmg_yolo.official_tree(tmp_path)
    assert not (tmp_path / "escaped.py").exists() and not (tmp_path.parent / "escaped.py").exists()


def test_the_registry_entry_names_its_stack_and_its_differences() -> None:
    spec = LOSSES.get("tfmg_yolo")
    assert (spec.family, spec.stack) == ("yolo", tfmg_yolo.STACK)
    assert spec.target == "repliscope.diff.loss.originals.tfmg_yolo:tfmg_yolo_loss"
    assert any("no YOLOv3 MSE" in d and "(2 - w*h)" in d for d in spec.differences)
    assert any("min_conf=0.25" in d for d in spec.differences)


# -- the real tf-models-official, in its stack --------------------------------------------------------------------


@pytest.fixture(scope="module")
def original() -> LossResult:
    from repliscope.stacks.call import run_loss
    from repliscope.stacks.spec import StackError

    try:
        return run_loss("tfmg_yolo", _inputs(), cache_dir=REAL_CACHE)
    except StackError as exc:
        if "resolving" in str(exc) or "installing" in str(exc):
            pytest.skip(f"the tfmg_yolo stack cannot be built here ({str(exc).splitlines()[-1]})")
        raise


def _decode(o: np.ndarray, name: str) -> np.ndarray:
    """(3, G, G, 4) boxes cx, cy, w, h (normalised) of one image's raw layer output, as the Model Garden decodes."""
    g = GRIDS[name]
    out = np.zeros((3, g, g, 4))
    jj, ii = np.meshgrid(np.arange(g), np.arange(g), indexing="ij")
    for a in range(3):
        aw, ah = ANCHORS[MASK[name][a]]
        out[a, ..., 0] = (ii + _sigmoid(o[_ch(a, 0)])) / g
        out[a, ..., 1] = (jj + _sigmoid(o[_ch(a, 1)])) / g
        out[a, ..., 2] = np.exp(o[_ch(a, 2)].astype(np.float64)) * aw / 416
        out[a, ..., 3] = np.exp(o[_ch(a, 3)].astype(np.float64)) * ah / 416
    return out


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ax0, ay0, ax1, ay1 = (
        a[..., 0] - a[..., 2] / 2,
        a[..., 1] - a[..., 3] / 2,
        a[..., 0] + a[..., 2] / 2,
        a[..., 1] + a[..., 3] / 2,
    )
    bx0, by0, bx1, by1 = (
        b[..., 0] - b[..., 2] / 2,
        b[..., 1] - b[..., 3] / 2,
        b[..., 0] + b[..., 2] / 2,
        b[..., 1] + b[..., 3] / 2,
    )
    inter = np.clip(np.minimum(ax1, bx1) - np.maximum(ax0, bx0), 0, None) * np.clip(
        np.minimum(ay1, by1) - np.maximum(ay0, by0), 0, None
    )
    return inter / (a[..., 2] * a[..., 3] + b[..., 2] * b[..., 3] - inter + 1e-9)


def _ciou_darknet(truth: np.ndarray, pred: np.ndarray) -> float:
    """box_ops.compute_ciou(truth, pred, darknet=True)'s value: IoU - centre term - v * (w^2 + h^2) * alpha."""
    iou = float(_iou(truth, pred))
    x0 = min(truth[0] - truth[2] / 2, pred[0] - pred[2] / 2)
    y0 = min(truth[1] - truth[3] / 2, pred[1] - pred[3] / 2)
    x1 = max(truth[0] + truth[2] / 2, pred[0] + pred[2] / 2)
    y1 = max(truth[1] + truth[3] / 2, pred[1] + pred[3] / 2)
    centre = ((truth[:2] - pred[:2]) ** 2).sum() / ((x1 - x0) ** 2 + (y1 - y0) ** 2 + 1e-9)
    v = 4 / np.pi**2 * (np.arctan(pred[2] / (pred[3] + 1e-9)) - np.arctan(truth[2] / (truth[3] + 1e-9))) ** 2
    alpha = v / (1 - iou + v + 1e-9)
    return float(iou - centre - v * (pred[2] ** 2 + pred[3] ** 2) * alpha)


def _bce(t: np.ndarray, p: np.ndarray) -> np.ndarray:
    return -t * np.log(p + 1e-9) - (1 - t) * np.log(1 - p + 1e-9)


def _derive(inputs: LossInputs) -> tuple[dict[str, float], dict[str, np.ndarray], list[float]]:
    """What DarknetLoss computes, in numpy: components (batch mean), d total / d objectness and class channels
    (other channels zero), per-image totals."""
    batch = len(inputs.targets)
    components = {f"{n}/{p}": 0.0 for n in GRIDS for p in ("box", "conf", "class")}
    grads = {n: np.zeros(o.shape) for n, o in inputs.outputs.items()}
    per_image = []
    for b, target in enumerate(inputs.targets):
        best = darknet_assignment(target.boxes, ANCHORS, 416, 416)
        image_total = 0.0
        for name, g in GRIDS.items():
            o = inputs.outputs[name][b]
            boxes = _decode(o, name)
            conf_t = np.zeros((3, g, g))
            cls_t = np.zeros((3, g, g, CLASSES))
            box_loss = 0.0
            for t, n in enumerate(best):
                if int(n) not in MASK[name]:
                    continue
                a = MASK[name].index(int(n))
                i, j = int(target.boxes[t, 0] * g), int(target.boxes[t, 1] * g)
                conf_t[a, j, i] = 1.0
                cls_t[a, j, i, int(target.classes[t])] = 1.0
                box_loss += 1 - _ciou_darknet(target.boxes[t].astype(np.float64), boxes[a, j, i])
            cls_p = np.stack([_sigmoid(o[_ch(a, 5) : _ch(a, 5) + CLASSES]) for a in range(3)]).transpose(0, 2, 3, 1)
            gate = (cls_p > 0.25).any(-1)
            best_iou = np.zeros((3, g, g))
            for t in range(len(target.boxes)):
                best_iou = np.maximum(best_iou, _iou(boxes, target.boxes[t].astype(np.float64)) * gate)
            obj_mask = conf_t + (1 - conf_t) * (best_iou < 0.7)
            obj_p = np.stack([_sigmoid(o[_ch(a, 4)]) for a in range(3)])
            conf = float((obj_mask * _bce(conf_t, obj_p)).sum())
            cls = float((conf_t * _bce(cls_t, cls_p).sum(-1)).sum())
            components[f"{name}/box"] += 0.07 * box_loss / batch
            components[f"{name}/conf"] += conf / batch
            components[f"{name}/class"] += cls / batch
            image_total += 0.07 * box_loss + conf + cls
            for a in range(3):
                grads[name][b, _ch(a, 4)] = obj_mask[a] * (obj_p[a] - conf_t[a]) / batch
                grads[name][b, _ch(a, 5) : _ch(a, 5) + CLASSES] = (
                    conf_t[a][..., None] * (cls_p[a] - cls_t[a])
                ).transpose(2, 0, 1) / batch
        per_image.append(image_total)
    return components, grads, per_image


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
@pytest.mark.timeout(1800)
def test_the_model_gardens_numbers_are_darknetloss_as_derived(original: LossResult) -> None:
    inputs = _inputs()
    components, grads, per_image = _derive(inputs)
    assert set(original.components) == set(components)
    for key, want in components.items():
        assert original.components[key] == pytest.approx(want, rel=2e-5, abs=2e-6), key
    assert original.per_image == pytest.approx(per_image, rel=2e-5)
    assert original.total == pytest.approx(sum(per_image) / 2, rel=2e-5)
    for name in GRIDS:
        got = original.gradients[name]
        assert got.dtype == np.float32 and got.shape == inputs.outputs[name].shape
        for a in range(3):
            sl = slice(_ch(a, 4), _ch(a, 5) + CLASSES)  # objectness and classes: Darknet's delta, sign flipped
            np.testing.assert_allclose(got[:, sl], grads[name][:, sl], rtol=1e-5, atol=1e-7)


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
@pytest.mark.timeout(1800)
def test_the_ignore_search_counts_only_predictions_with_a_class_above_a_quarter(original: LossResult) -> None:
    o = _inputs().outputs["yolo_16"]
    grad = original.gradients["yolo_16"]
    # anchor 0 predicts the truth with class probability 0.98: ignored, no objectness gradient (as Darknet)
    assert grad[0, _ch(0, 4), 6, 6] == 0.0
    # anchor 1 predicts it as well (IoU 0.95) with every class below 0.25: the Model Garden still pushes its
    # objectness down (d/d obj = sigmoid(obj) / batch); Darknet's delta there is 0 (the named difference)
    assert grad[0, _ch(1, 4), 6, 6] == pytest.approx(float(_sigmoid(o[0, _ch(1, 4), 6, 6])) / 2, rel=1e-6)


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
@pytest.mark.timeout(1800)
def test_box_gradients_exist_only_where_a_truth_is(original: LossResult) -> None:
    inputs = _inputs()
    for name in GRIDS:
        grad = original.gradients[name]
        box = np.stack([grad[:, _ch(a, 0) : _ch(a, 4)] for a in range(3)], axis=1)  # (N, 3, 4, G, G)
        cells = {tuple(c) for c in np.argwhere(np.abs(box).sum(axis=2) > 0).tolist()}
        want = set()
        for b, target in enumerate(inputs.targets):
            for t, n in enumerate(darknet_assignment(target.boxes, ANCHORS, 416, 416)):
                if int(n) in MASK[name]:
                    g = GRIDS[name]
                    want.add((b, MASK[name].index(int(n)), int(target.boxes[t, 1] * g), int(target.boxes[t, 0] * g)))
        assert cells == want
    assert any("padded truths" in n or "build_grid" in n for n in original.notes)


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
@pytest.mark.timeout(1800)
def test_against_libdarknet_equal_where_equal_named_where_not(original: LossResult) -> None:
    """Issue 39 item 6, on libdarknet's own forward_yolo_layer (``darknet_yolo``): the Model Garden's objectness
    and class gradients ARE Darknet's delta (sign flipped, over the batch of 2) except at the one prediction its
    min_conf gate keeps from being ignored; its box gradients are another form (CIoU, no (2 - w*h) MSE) at the very
    same cells; its conf term is Darknet's objectness + no-object."""
    from repliscope.stacks.call import run_loss
    from tests.yolo._assets import need_darknet

    need_darknet()
    inputs = _inputs()
    darknet = run_loss("darknet_yolo", inputs)
    batch = len(inputs.targets)
    for name in GRIDS:
        ours, theirs = original.gradients[name] * batch, darknet.gradients[name]
        for a in range(3):
            head = slice(_ch(a, 4), _ch(a, 5) + CLASSES)
            differ = np.argwhere(~np.isclose(ours[:, head], theirs[:, head], rtol=1e-5, atol=1e-6)).tolist()
            assert differ == ([[0, 0, 6, 6]] if (name, a) == ("yolo_16", 1) else []), (name, a)
            box = slice(_ch(a, 0), _ch(a, 4))
            assert (np.argwhere(ours[:, box] != 0).tolist()) == np.argwhere(theirs[:, box] != 0).tolist()
            if np.any(theirs[:, box]):
                assert not np.allclose(ours[:, box], theirs[:, box], atol=1e-3)
    o = inputs.outputs["yolo_16"][0, _ch(1, 4), 6, 6]
    gated = -np.log(1 - float(_sigmoid(np.array(o))) + 1e-9)  # the no-object BCE Darknet does not count there
    for name in GRIDS:
        assert original.components[f"{name}/class"] == pytest.approx(
            darknet.components[f"{name}/class"] / batch, rel=1e-5
        )
        conf = darknet.components[f"{name}/objectness"] + darknet.components[f"{name}/no_object"]
        conf += gated if name == "yolo_16" else 0.0
        assert original.components[f"{name}/conf"] == pytest.approx(conf / batch, rel=1e-5)
    spec = LOSSES.get("tfmg_yolo")
    assert any("no YOLOv3 MSE" in d for d in spec.differences) and any("min_conf" in d for d in spec.differences)

"""``maskformer``: transformers' MaskFormerLoss and Hungarian matcher in their stack, pinned against a numpy
derivation (scipy's ``linear_sum_assignment`` on the rectangular cost); a TensorFlow port (``maskformer_tf_candidate``)
against it: the faithful port agrees, each one-mistake port diverges where its mistake is, and 003's square cost
matrix padded with 0 changes the matching.

The stack tests (``slow``, ``stack``, ``network``) build the stack on first use (``make loss-stacks``; about 45 s and
1.5 GB from an empty pip cache) and reuse it afterwards.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from repliscope.diff.loss.contract import LOSSES, ImageTargets, LossInputs, LossResult
from repliscope.paths import default_cache_dir
from tests.diff.loss.originals import maskformer_tf_candidate as tfc

REAL_CACHE = default_cache_dir()
"""This machine's stack cache (read at import, before the autouse fixture points REPLISCOPE_CACHE elsewhere)."""

Q, C, SIDE = 10, 5, 24
WEIGHTS = {"loss_ce": 1.0, "loss_mask": 20.0, "loss_dice": 1.0}
"""MaskFormerConfig's defaults: cross_entropy_weight 1, mask_weight 20, dice_weight 1 (and no_object_weight 0.1)."""
PLANTED = ((2, 5, 8), (4,))
"""The query that predicts each target well, per image (the greedy matcher's padded zeros take rows 0..6 first)."""


def _inputs() -> LossInputs:
    rng = np.random.default_rng(2107)
    class_logits = rng.normal(0.0, 1.0, (2, Q, C + 1)).astype(np.float32)
    mask_logits = rng.normal(-1.0, 1.0, (2, Q, SIDE, SIDE)).astype(np.float32)
    shapes = (((2, 14, 3, 12), (10, 22, 12, 20), (3, 9, 15, 23)), ((6, 20, 4, 16),))
    classes = ((1, 4, 2), (0,))
    targets = []
    for b, (boxes, labels) in enumerate(zip(shapes, classes, strict=True)):
        masks = np.zeros((len(boxes), SIDE, SIDE), bool)
        for k, (y0, y1, x0, x1) in enumerate(boxes):
            masks[k, y0:y1, x0:x1] = True
            q = PLANTED[b][k]
            mask_logits[b, q] = np.where(masks[k], 1.0, -1.0) + rng.normal(0, 0.5, (SIDE, SIDE))
            class_logits[b, q, labels[k]] += 1.0
        targets.append(ImageTargets(f"img{b}", np.zeros((len(boxes), 4), np.float32), np.array(labels), masks))
    return LossInputs(
        family="mask_classification",
        outputs={"class_logits": class_logits, "mask_logits": mask_logits},
        targets=tuple(targets),
        config={"num_classes": C, "eos_coef": 0.1, "weights": WEIGHTS},
    )


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


def _bce_logits(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))


def _derive(inputs: LossInputs) -> tuple[dict[str, float], tuple[tuple[tuple[int, int, float], ...], ...]]:
    """MaskFormer's loss in numpy: the matcher's cost, scipy's assignment, weighted CE, focal and dice."""
    cls_all, masks_all = inputs.outputs["class_logits"], inputs.outputs["mask_logits"]
    num_masks = max(sum(len(t.classes) for t in inputs.targets), 1)
    ce_num = ce_den = focal = dice = 0.0
    matching = []
    for b, target in enumerate(inputs.targets):
        assert target.masks is not None
        x = masks_all[b].reshape(Q, -1).astype(np.float64)
        y = target.masks.reshape(len(target.classes), -1).astype(np.float64)
        p = _sigmoid(x)
        pos = 0.25 * (1 - p) ** 2 * _bce_logits(x, np.ones_like(x))
        neg = 0.75 * p**2 * _bce_logits(x, np.zeros_like(x))
        pair_focal = (pos @ y.T + neg @ (1 - y).T) / x.shape[1]
        pair_dice = 1 - (2 * p @ y.T + 1) / (p.sum(-1)[:, None] + y.sum(-1)[None, :] + 1)
        logits = cls_all[b].astype(np.float64)
        softmax = np.exp(logits - logits.max(-1, keepdims=True))
        softmax /= softmax.sum(-1, keepdims=True)
        cost = WEIGHTS["loss_mask"] * pair_focal - softmax[:, target.classes] + WEIGHTS["loss_dice"] * pair_dice
        rows, cols = linear_sum_assignment(cost)
        matching.append(tuple((int(r), int(c), float(cost[r, c])) for r, c in sorted(zip(rows, cols, strict=True))))
        target_classes = np.full(Q, C)
        target_classes[rows] = target.classes[cols]
        weight = np.where(target_classes == C, 0.1, 1.0)
        log_softmax = np.log(softmax)
        ce_num += float((-log_softmax[np.arange(Q), target_classes] * weight).sum())
        ce_den += float(weight.sum())
        for r, c in zip(rows, cols, strict=True):
            focal += float(
                (
                    _bce_logits(x[r], y[c])
                    * (1 - (p[r] * y[c] + (1 - p[r]) * (1 - y[c]))) ** 2
                    * (0.25 * y[c] + 0.75 * (1 - y[c]))
                ).mean()
            )
            dice += float(1 - (2 * (p[r] * y[c]).sum() + 1) / (p[r].sum() + y[c].sum() + 1))
    return {"loss_ce": ce_num / ce_den, "loss_mask": focal / num_masks, "loss_dice": dice / num_masks}, tuple(matching)


def _pairs(result: LossResult) -> list[set[tuple[int, int]]]:
    assert result.matching is not None
    return [{(p, t) for p, t, _ in image} for image in result.matching]


# -- without the stack --------------------------------------------------------------------------------------------


def test_an_exact_solver_is_blind_to_the_pad_value_a_greedy_one_is_not() -> None:
    """Why 003's zero padding matters only with an accelerator's approximate matcher: with an exact assignment
    every padded column costs the same whatever row takes it."""
    inputs = _inputs()
    _, matching = _derive(inputs)
    rng = np.random.default_rng(0)
    cost = rng.normal(1.0, 0.3, (Q, 3))
    want = set(zip(*linear_sum_assignment(cost), strict=True))
    for pad in (0.0, float(cost.max())):
        square = np.full((Q, Q), pad)
        square[:, :3] = cost
        rows, cols = linear_sum_assignment(square)
        assert {(int(r), int(c)) for r, c in zip(rows, cols, strict=True) if c < 3} == {
            (int(r), int(c)) for r, c in want
        }
    square = np.zeros((Q, Q))
    square[:, :3] = cost
    greedy = {(r, c) for r, c in tfc.greedy_square_match(square) if c < 3}
    assert {r for r, _ in greedy} == {7, 8, 9}  # the zeros were handed out first, in row order
    assert [{(p, t) for p, t, _ in image} for image in matching] == [{(2, 0), (5, 1), (8, 2)}, {(4, 0)}]


def test_the_registry_entry_names_its_stack() -> None:
    spec = LOSSES.get("maskformer")
    assert (spec.family, spec.stack) == ("mask_classification", "torch==2.13.0 transformers==5.24.0")
    assert spec.target == "repliscope.diff.loss.originals.maskformer:maskformer_loss"


# -- the real transformers, in its stack --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def original() -> LossResult:
    from repliscope.stacks.call import run_loss
    from repliscope.stacks.spec import StackError

    try:
        return run_loss("maskformer", _inputs(), cache_dir=REAL_CACHE)
    except StackError as exc:
        if "resolving" in str(exc) or "installing" in str(exc):
            pytest.skip(f"the maskformer stack cannot be built here ({str(exc).splitlines()[-1]})")
        raise


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
@pytest.mark.timeout(1800)
def test_transformers_numbers_are_maskformers_as_derived(original: LossResult) -> None:
    components, matching = _derive(_inputs())
    for key, value in components.items():
        assert original.components[key] == pytest.approx(value, rel=1e-5), key
    assert original.total == pytest.approx(sum(WEIGHTS[k] * v for k, v in components.items()), rel=1e-5)
    assert _pairs(original) == [{(p, t) for p, t, _ in image} for image in matching]
    assert original.matching is not None
    for got, expected in zip(original.matching, matching, strict=True):
        assert [c for _, _, c in got] == pytest.approx([c for _, _, c in expected], rel=1e-5)
    assert original.per_image is not None and len(original.per_image) == 2


def _diverging(candidate: LossResult, original: LossResult) -> set[str]:
    """The components a candidate gets wrong (relative error above 1e-4: float32 sums over a few thousand pixels
    in two frameworks agree to ~1e-6)."""
    return {k for k, v in original.components.items() if abs(candidate.components[k] - v) > 1e-4 * max(abs(v), 1e-6)}


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
@pytest.mark.timeout(1800)
def test_the_faithful_tensorflow_port_agrees_gradients_included(original: LossResult) -> None:
    port = tfc.correct(_inputs())
    assert _diverging(port, original) == set()
    assert port.total == pytest.approx(original.total, rel=1e-5)
    assert _pairs(port) == _pairs(original)
    for name in ("class_logits", "mask_logits"):
        scale = float(np.abs(original.gradients[name]).max())
        np.testing.assert_allclose(port.gradients[name], original.gradients[name], rtol=0, atol=1e-5 * scale)


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(
    ("candidate", "wrong", "matching_changes"),
    [
        (tfc.square_zero_padded, {"loss_ce", "loss_mask", "loss_dice"}, True),
        (tfc.no_object_weight_one, {"loss_ce"}, False),
        (tfc.dice_unsmoothed, {"loss_dice"}, False),
        (tfc.padded_pixels_counted, {"loss_mask", "loss_dice"}, False),
    ],
    ids=["square-padded-with-0", "no-object-weight-1", "dice-unsmoothed", "padded-pixels-counted"],
)
def test_each_one_mistake_port_diverges_where_its_mistake_is(
    original: LossResult, candidate: Callable[[LossInputs], LossResult], wrong: set[str], matching_changes: bool
) -> None:
    port = candidate(_inputs())
    assert _diverging(port, original) == wrong
    assert (_pairs(port) != _pairs(original)) is matching_changes
    if matching_changes:  # 003's mistake: the padded zeros took rows 0..6, the targets got what was left
        assert _pairs(port) == [{(7, 0), (8, 2), (9, 1)}, {(9, 0)}]


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
@pytest.mark.timeout(1800)
def test_the_numpy_form_the_pitfalls_vary_is_the_original(original: LossResult) -> None:
    from repliscope.diff.loss.originals.maskformer_pitfalls import MASKFORMER, form_values

    values = form_values(_inputs(), MASKFORMER)
    assert values["total"] == pytest.approx(original.total, rel=1e-5)
    for key, value in original.components.items():
        assert values[key] == pytest.approx(value, rel=1e-5), key


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(
    ("candidate", "pitfall", "change", "first"),
    [
        (tfc.square_zero_padded, "square_matcher_zero_padding", "square cost padded with 0, greedy matcher", "loss_ce"),
        (tfc.no_object_weight_one, "no_object_weight", "no-object weight 1", "loss_ce"),
        (tfc.dice_unsmoothed, "dice_smoothing", "dice smoothing 0", "loss_dice"),
        (
            tfc.padded_pixels_counted,
            "padded_pixels_not_masked",
            "8 padded pixels at the bottom and right counted",
            "loss_mask",
        ),
    ],
    ids=["square-padded-with-0", "no-object-weight-1", "dice-unsmoothed", "padded-pixels-counted"],
)
def test_the_loss_diff_names_each_mistake(
    original: LossResult, candidate: Callable[[LossInputs], LossResult], pitfall: str, change: str, first: str
) -> None:
    from repliscope.diff.loss.driver import run_loss_diff

    result = run_loss_diff(
        _inputs(), LOSSES.get("maskformer"), lambda _: original, candidate.__name__, candidate, source="random"
    )
    assert not result.passed and result.first_divergent == first
    assert result.diagnosis is not None
    assert (result.diagnosis.verdict, result.diagnosis.pitfall, result.diagnosis.change) == (
        "explained",
        pitfall,
        change,
    )
    assert result.diagnosis.residual is not None and result.diagnosis.residual < 1e-6


@pytest.mark.slow
@pytest.mark.stack
@pytest.mark.network
@pytest.mark.timeout(1800)
def test_the_faithful_port_passes_the_loss_diff_against_the_stack() -> None:
    """The whole path: the original through repliscope.stacks.call (its stack), the port here."""
    import functools

    from repliscope.diff.loss.driver import run_loss_diff
    from repliscope.stacks.call import run_loss

    spec = LOSSES.get("maskformer")
    result = run_loss_diff(
        _inputs(),
        spec,
        functools.partial(run_loss, spec, cache_dir=REAL_CACHE),
        "correct",
        tfc.correct,
        source="random",
    )
    assert result.passed and result.first_divergent is None
    assert result.diagnosis is not None and result.diagnosis.verdict == "match"
    assert result.matching is not None and all(row.passed for row in result.matching)

"""The loader's static checks of a segmentation manifest: each problem named with its file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.errors import ManifestError, ManifestErrors
from repliscope.manifest.loader import load_manifest

FIXTURE = Path(__file__).parents[1] / "fixtures" / "segmentation" / "colour-segmenter.yaml"


def _errors(tmp_path: Path, old: str, new: str) -> list[str]:
    text = FIXTURE.read_text()
    assert old in text
    p = tmp_path / "m.yaml"
    p.write_text(text.replace(old, new))
    for name in ("colour_segmenter.onnx", "colour-labels.txt"):
        (tmp_path / name).write_bytes((FIXTURE.parent / name).read_bytes())
    with pytest.raises((ManifestError, ManifestErrors)) as ei:
        load_manifest(p)
    return [str(e) for e in ei.value.errors]


def test_the_fixture_loads() -> None:
    assert load_manifest(FIXTURE).manifest.task == "semantic_segmentation"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "    activated: false",
            "    activated: true",
            "field 'postprocess[0].activated': output 'logits' is of kind mask_logits: activated must be false",
        ),
        (
            "  - op: mask_argmax",
            "  - op: mask_argmax\n  - op: mask_argmax",
            "field 'postprocess': the postprocess needs exactly one mask_argmax or mask_threshold "
            "(labels per pixel), has 2",
        ),
        (
            "    input_size: [32, 32]",
            "    input_size: [32, 64]",
            "field 'postprocess[2].input_size': input_size [32, 64] is not the model input's [height, width] [32, 32]",
        ),
        (
            "    shape: [1, 32, 32, 3]\n    dtype: float32\n    layout: NHWC\n    kind: mask_logits",
            "    shape: [1, 32, 32, 5]\n    dtype: float32\n    layout: NHWC\n    kind: mask_logits",
            "field 'outputs[0].shape': output 'logits' has 5 class channels, labels.num_classes is 3",
        ),
        (
            "  - op: mask_from_outputs\n    output: logits",
            "  - op: mask_from_outputs\n    output: scores",
            "field 'postprocess[0].output': output 'scores' is not one of the manifest's outputs (logits)",
        ),
        (
            "  - op: mask_argmax",
            "  - op: topk\n    k: 1",
            "field 'postprocess[3].op': 'topk' is not a post-processing op of semantic_segmentation",
        ),
        (
            "  - metric: mIoU\n    value: 1.0",
            "  - metric: mIoU\n    value: 72.3",
            "field 'claims[0]': mIoU is a fraction (0.723 for 72.3 %): 72.3 is above 1",
        ),
    ],
)
def test_problems_are_named(tmp_path: Path, old: str, new: str, expected: str) -> None:
    errors = _errors(tmp_path, old, new)
    assert any(expected in e for e in errors), errors

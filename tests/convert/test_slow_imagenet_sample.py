"""Issue 4, section 3: after conversion the Keras port matches the torch original at top-1 on EVERY image of
the 1000-image ImageNet sample (../shared/data/imagenet-sample; skipped when absent)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from repliscope.convert.verify import compare_logits, keras_logits, torch_logits
from tests.convert import _helpers as H
from tests.support import lite0_input


@pytest.mark.slow
def test_keras_port_matches_torch_top1_on_every_sample_image() -> None:
    if not H.IMAGENET_SAMPLE.is_dir():
        pytest.skip(f"{H.IMAGENET_SAMPLE} is absent")
    start = time.perf_counter()
    files = sorted(p for p in H.IMAGENET_SAMPLE.iterdir() if p.suffix.lower() in {".jpeg", ".jpg", ".png"})
    assert len(files) == 1000
    wnids = sorted({p.name.split("_", 1)[0] for p in files})
    assert len(wnids) == 1000
    labels = np.array([wnids.index(p.name.split("_", 1)[0]) for p in files])
    module, (model, _) = H.torch_lite0(), H.converted()
    flipped: list[str] = []
    max_prob_diff = 0.0
    correct = [0, 0]
    with ThreadPoolExecutor(2) as pool:
        for i in range(0, len(files), 100):
            x = np.stack(list(pool.map(lite0_input, files[i : i + 100])))
            ref, cand = torch_logits(module, x, 10), keras_logits(model, x, 50)  # fastest batch sizes here
            check = compare_logits(ref, cand)
            flipped += [files[i + j].name for j in check.flipped]
            max_prob_diff = max(max_prob_diff, check.max_abs_prob_diff)
            correct[0] += int((ref.argmax(-1) == labels[i : i + 100]).sum())
            correct[1] += int((cand.argmax(-1) == labels[i : i + 100]).sum())
    print(
        f"1000 images in {time.perf_counter() - start:.1f} s; max |prob diff| {max_prob_diff:.2e}; "
        f"top-1 correct torch {correct[0]}, keras {correct[1]}"
    )
    assert flipped == []
    assert correct[0] == correct[1]
    assert max_prob_diff < 1e-4

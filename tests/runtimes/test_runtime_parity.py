"""EfficientNet-Lite0 on torch, onnxruntime and OpenCV DNN: same accuracy, same top-1, same probabilities."""

from __future__ import annotations

import numpy as np
import pytest

from repliscope.runtimes import Runner

from .conftest import RUNTIME_NAMES, THREADS, Images

# Lite0 gets 18 of the 20 foolbox images right; the two misses (verified with torch):
GOLDEN_MISSES = {"imagenet_06_609.jpg": 436, "imagenet_07_609.jpg": 511}


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("name", RUNTIME_NAMES)
def test_accuracy_18_of_20(name: str, scores: dict[str, np.ndarray], images: Images) -> None:
    out = scores[name]
    assert out.shape == (20, 1000)
    assert out.dtype == np.float32
    top1 = out.argmax(axis=1)
    assert int((top1 == images.labels).sum()) == 18
    misses = {images.names[i]: int(top1[i]) for i in np.flatnonzero(top1 != images.labels)}
    assert misses == GOLDEN_MISSES


def test_top1_identical_across_runtimes(scores: dict[str, np.ndarray]) -> None:
    reference = scores["torch"].argmax(axis=1)
    for name in RUNTIME_NAMES:
        np.testing.assert_array_equal(scores[name].argmax(axis=1), reference, err_msg=name)


def test_probabilities_agree_within_1e4(scores: dict[str, np.ndarray]) -> None:
    probs = {name: softmax(s) for name, s in scores.items()}
    for i, a in enumerate(RUNTIME_NAMES):
        for b in RUNTIME_NAMES[i + 1 :]:
            diff = float(np.abs(probs[a] - probs[b]).max())
            assert diff < 1e-4, f"{a} vs {b}: max |p_a - p_b| = {diff:.2e}"


@pytest.mark.parametrize("name", RUNTIME_NAMES)
def test_batch_of_one_and_odd_batch_match_the_big_batch(
    name: str, runners: dict[str, Runner], scores: dict[str, np.ndarray], images: Images
) -> None:
    one = runners[name].infer(images.x[:1])
    three = runners[name].infer(images.x[5:8])
    assert one.shape == (1, 1000) and three.shape == (3, 1000)
    np.testing.assert_allclose(one, scores[name][:1], atol=1e-4, rtol=0)
    np.testing.assert_allclose(three, scores[name][5:8], atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", RUNTIME_NAMES)
def test_info_records_framework_threads_and_provenance(name: str, runners: dict[str, Runner]) -> None:
    info = runners[name].info()
    assert info["runtime"] == name
    assert info["threads"] == THREADS
    assert (
        info["framework"]
        in {
            "torch": {"torch"},
            "onnxruntime": {"onnxruntime"},
            "opencv_dnn": {"opencv-python-headless", "opencv-python"},
        }[name]
    )
    assert info["framework_version"]
    assert runners[name].last_inference_seconds > 0
    model = info["model"] if name == "torch" else info["export"]["model"]
    assert model["declared_activation"] == "relu6"
    assert model["activation_modules"] == {"ReLU6": 17}  # Lite keeps ReLU6: set_swish() was never called
    if name == "onnxruntime":
        assert info["providers"] == ["CPUExecutionProvider"]
        assert info["session"]["intra_op_num_threads"] == THREADS
        assert info["session"]["inter_op_num_threads"] == 1
    if name == "opencv_dnn":
        assert info["engine"]["name"] in {"new", "classic"}

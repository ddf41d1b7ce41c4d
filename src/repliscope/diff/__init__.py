"""Differential testing: task-level (two runs or runtimes on the same samples) and layer-level (a candidate
implementation against the torch reference, golden and carried modes).

Importing this package imports no ML framework; candidates are registered lazily.
"""

from __future__ import annotations

from repliscope.diff.base import CANDIDATES, Candidate, LayerInfo

CANDIDATES.add("onnxruntime", "repliscope.diff.onnx_candidate:OnnxCandidate")
CANDIDATES.add("keras", "repliscope.diff.keras_candidate:KerasCandidate")
CANDIDATES.add("onnx", "repliscope.diff.onnx_candidate:OnnxCandidate")
CANDIDATES.add("tflite", "repliscope.diff.tflite_candidate:TfliteCandidate")
CANDIDATES.add("savedmodel", "repliscope.diff.tensorflow_candidate:TensorflowCandidate")
CANDIDATES.add("torch", "repliscope.diff.torch_candidate:TorchCandidate")

__all__ = ["CANDIDATES", "Candidate", "LayerInfo"]

"""The unit-level (layer) diff: a candidate implementation against a reference, unit by unit, golden and carried.

``driver`` (:func:`~repliscope.diff.layers.driver.diff_layers`, the one driver), ``layer_result`` (its record),
``torch_reference`` / ``ref_ops`` (the torch module as the reference), ``mapping`` / ``auto_mapping`` /
``candidate_format`` (building and pairing a re-implementation), ``onnx_*`` (ONNX graphs as units),
``runtime_layers`` (two runtimes node by node on one ONNX graph), ``manifest_layers`` (what ``repliscope diff
MANIFEST --layers`` selects) and ``plot``. The contracts both sides implement are in :mod:`repliscope.diff.base`.
"""

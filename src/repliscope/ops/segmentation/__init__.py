"""Semantic segmentation ops: the ``warp_resize`` pre op (MediaPipe's corner-aligned warp) and the post ops from
model outputs to a label map of the decoded image.

Post-processing order of a typical manifest: ``mask_from_outputs`` -> (``mask_activation``) -> ``mask_resize``
(probabilities, bilinear) -> ``mask_argmax`` or ``mask_threshold``; or argmax / threshold first and a nearest
``mask_resize`` of the labels. It must end with labels in the source image's pixels (the task checks).
"""

from repliscope.ops.segmentation import masks, resample, warp

__all__ = ["masks", "resample", "warp"]

"""Detection ops: the ``letterbox`` pre op and the post ops from model outputs to source-image boxes.

Post-processing order of a typical manifest: (``score_activation``) -> ``anchor_decode`` or
``detections_from_outputs`` -> ``score_threshold`` -> ``nms`` -> ``max_detections`` -> ``box_format`` ->
``to_source`` -> ``class_map``; it must end in :data:`repliscope.ops.base.FINAL_BOX_FORMAT`.
"""

from repliscope.ops.detection import anchors, boxes, class_map, letterbox, nms, outputs, scores

__all__ = ["anchors", "boxes", "class_map", "letterbox", "nms", "outputs", "scores"]

"""Darknet's (pjreddie, 2018) pre- and post-processing as ops, pinned to libdarknet's own output:
``darknet_letterbox`` (pre), then ``yolo_decode`` -> ``darknet_correct_boxes`` -> ``darknet_nms`` ->
``darknet_boxes`` (post), followed by the shared ``class_map`` (``coco80_to_91`` = Darknet's ``coco_ids``); and
the anchor-free head of today's YOLO exports, ``yolo_anchor_free_decode``."""

from repliscope.ops.darknet import anchor_free, boxes, letterbox, nms, yolo_head

__all__ = ["anchor_free", "boxes", "letterbox", "nms", "yolo_head"]

"""Tasks (``image_classification``, ``object_detection``, ``semantic_segmentation``): see
:mod:`repliscope.tasks.base`."""

from repliscope.tasks.base import TASKS, Task, get_task

__all__ = ["TASKS", "Task", "get_task"]

"""Size limits of the pre-processing ops (see docs/guides/safe-inputs.md).

Every op that makes an image (``resize``, ``center_crop`` with padding, ``letterbox``) checks its output's
width x height against :data:`repliscope.limits.MAX_PIXELS` BEFORE allocating it, the way ``decode`` checks the
file header against its ``max_pixels``; the manifest loader checks the same limit statically from the ops' fixed
sizes, so ``resize size: 40000`` is refused by ``manifest validate``.
"""

from __future__ import annotations

from repliscope.errors import SampleError
from repliscope.limits import MAX_PIXELS


def check_output_pixels(height: int, width: int, op: str) -> None:
    """SampleError when an ``op`` output of ``height`` x ``width`` is over the ``max_pixels`` limit."""
    limit = MAX_PIXELS.value
    if height * width > limit:
        raise SampleError(
            f"'{op}' would make a {width}x{height} image ({height * width:,} pixels), more than the "
            f"{limit:,}-pixel limit ({MAX_PIXELS.name}, ${MAX_PIXELS.env})"
        )

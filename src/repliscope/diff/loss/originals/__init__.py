"""Original losses that run in provisioned stacks: ``tfmg_yolo`` (the TF Model Garden's YOLO loss,
tf-models-official 2.20.0 on TensorFlow 2.20) and ``maskformer`` (transformers' PyTorch MaskFormer loss and
Hungarian matcher). Their registry entries (``LOSSES``) name the stack; :mod:`repliscope.stacks.call` runs them
there.

This package imports no framework: each original imports its framework inside its loss function, so the entries
can be listed (and the TF Model Garden's sources fetched) from any environment.
"""

from __future__ import annotations

from pathlib import Path


def source_paths(name: str, cache_dir: Path | None = None) -> tuple[Path, ...]:
    """Folders the registered loss ``name`` needs on ``sys.path`` beside its stack, fetched and verified in the
    CALLER's environment (which has pip's configuration; a stack's venv has no pip): ``tfmg_yolo`` -> the
    ``official/`` tree of the sha256-pinned tf-models-official wheel (:func:`.tfmg_yolo.official_tree`); ``()``
    for every other loss. ``cache_dir``: the cache folder (default: repliscope's)."""
    if name == "tfmg_yolo":
        from repliscope.diff.loss.originals.tfmg_yolo import official_tree

        return (official_tree(cache_dir),)
    return ()

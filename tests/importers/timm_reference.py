"""Run inside a timm stack: timm's own eval transform on images, one line of JSON per (config, image).

``python timm_reference.py JOB.json`` where JOB is ``{"images": [paths], "configs": [pretrained_cfg dicts],
"arrays": [[config index, image index], ...]}``. For every pair it prints ``{"c": i, "i": j, "shape": [...],
"sha256": hex}`` of the float32 tensor ``create_transform(**resolve_data_config(pretrained_cfg=cfg),
is_training=False)(Image.open(path).convert("RGB"))`` (timm's ImageDataset reads images that way); for the pairs
in ``arrays`` it also writes the tensor to ``JOB.<c>.<i>.npy`` beside the job file (to show a difference).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch.library
from PIL import Image

_register_fake = torch.library.register_fake


def _skip_torchvision_ops(op: Any, *args: Any, **kwargs: Any) -> Any:
    """The registry's torchvision wheel is a CUDA build whose C operators (nms, roi_align) do not load next to the
    CPU torch; its ``_meta_registrations`` would then fail at import. Those operators are never used by the eval
    transform compared here (PIL resize, crop, to_tensor, Normalize), so their fake kernels are skipped."""
    if isinstance(op, str) and op.startswith("torchvision::"):
        return lambda fn=None, /, *a, **k: fn if fn is not None else (lambda f: f)
    return _register_fake(op, *args, **kwargs)


torch.library.register_fake = _skip_torchvision_ops

import timm  # noqa: E402
from timm.data import create_transform, resolve_data_config  # noqa: E402


def main() -> None:
    job_path = Path(sys.argv[1])
    job = json.loads(job_path.read_text(encoding="utf-8"))
    images = [Image.open(p).convert("RGB") for p in job["images"]]
    keep = {tuple(pair) for pair in job.get("arrays", [])}
    print(json.dumps({"timm": timm.__version__}), flush=True)
    for c, cfg in enumerate(job["configs"]):
        transform = create_transform(**resolve_data_config(pretrained_cfg=cfg), is_training=False)
        for i, img in enumerate(images):
            out = transform(img).numpy().astype(np.float32, copy=False)
            print(
                json.dumps(
                    {
                        "c": c,
                        "i": i,
                        "shape": list(out.shape),
                        "sha256": hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest(),
                    }
                )
            )
            if (c, i) in keep:
                np.save(job_path.with_suffix(f".{c}.{i}.npy"), out)


if __name__ == "__main__":
    main()

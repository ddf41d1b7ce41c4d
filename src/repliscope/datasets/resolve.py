"""Turn a dataset spec from a manifest or the command line into a :class:`Dataset`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from repliscope.datasets.base import DATASETS, Dataset
from repliscope.datasets.image_folder import load_image_folder
from repliscope.errors import DatasetError


def resolve_dataset(spec: str, label_rule: str | None = None, **kw: Any) -> Dataset:
    """A registered dataset name (e.g. ``foolbox_imagenet``) or an existing directory (``image_folder``).

    Registered names win over a same-named directory in the working directory; write ``./name`` for that.
    ``label_rule`` and ``kw`` go to the loader.
    """
    if spec in DATASETS:
        if label_rule is not None:
            kw["label_rule"] = label_rule
        return DATASETS.get(spec)(**kw)
    path = Path(spec).expanduser()
    if path.is_dir():
        return load_image_folder(path, label_rule, **kw)
    what = "is a file, not a directory" if path.exists() else "is neither a registered dataset nor a directory"
    raise DatasetError(
        f"dataset '{spec}' {what}. Give a folder of images or one of: {', '.join(DATASETS.names())}"
    )

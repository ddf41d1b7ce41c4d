"""Turn a dataset spec from a manifest or the command line into a :class:`Dataset`."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from repliscope.datasets.base import DATASETS, Dataset
from repliscope.datasets.image_folder import load_image_folder
from repliscope.errors import DatasetError


def resolve_dataset(spec: str, label_rule: str | None = None, **kw: Any) -> Dataset:
    """A registered dataset name (e.g. ``foolbox_imagenet``) or an existing directory (``image_folder``).

    Registered names win over a same-named directory in the working directory; write ``./name`` for that.
    ``label_rule`` and ``kw`` go to the loader; options whose value is None count as not given.
    """
    options = {k: v for k, v in kw.items() if v is not None}
    if label_rule is not None:
        options["label_rule"] = label_rule
    if spec in DATASETS:
        loader = DATASETS.get(spec)
        _check_options(spec, loader, options)
        return loader(**options)
    path = Path(spec).expanduser()
    if path.is_dir():
        _check_options("image_folder", load_image_folder, options)
        return load_image_folder(path, **options)
    what = (
        "is a file, not a directory" if path.exists() else "is neither a registered dataset nor a directory"
    )
    raise DatasetError(
        f"dataset '{spec}' {what}. Give a folder of images or one of: {', '.join(DATASETS.names())}"
    )


def _check_options(name: str, loader: Any, options: dict[str, Any]) -> None:
    params = inspect.signature(loader).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = sorted(set(options) - set(params))
    if unknown:
        allowed = [p for p in params if p != "path"]
        raise DatasetError(
            f"dataset '{name}' does not take {', '.join(unknown)} (allowed: {', '.join(allowed)})"
        )

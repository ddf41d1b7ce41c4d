"""Turn a dataset spec from a manifest or the command line into a :class:`Dataset`."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from repliscope.datasets.base import DATASETS, Dataset
from repliscope.datasets.image_folder import load_image_folder
from repliscope.errors import DatasetError


def resolve_dataset(spec: str, label_rule: str | None = None, **kw: Any) -> Dataset:
    """A registered dataset name (e.g. ``foolbox_imagenet``), ``NAME:PATH`` (a registered loader given a path,
    e.g. ``coco:../shared/data/coco-val-mini``, ``dlib_xml:faces/testing.xml``) or an existing directory
    (``image_folder``).

    Registered names win over a same-named directory in the working directory; write ``./name`` for that.
    ``label_rule`` and ``kw`` go to the loader; options whose value is None count as not given. A loader
    that cannot be called with these options (one it does not take, or a required one missing, such as
    ``image_folder``'s folder) is a DatasetError, never a TypeError.
    """
    options = {k: v for k, v in kw.items() if v is not None}
    if label_rule is not None:
        options["label_rule"] = label_rule
    if spec in DATASETS:
        loader = DATASETS.get(spec)
        _check_options(spec, loader, options)
        return loader(**options)
    named = _named_path(spec)
    if named is not None:
        name, where = named
        loader = DATASETS.get(name)
        if "path" not in inspect.signature(loader).parameters:
            raise DatasetError(
                f"dataset '{name}' takes no path: write --dataset {name} (datasets that take "
                f"NAME:PATH: {', '.join(path_names())})"
            )
        _check_options(name, loader, options, given=("path",))
        return loader(path=where, **options)
    path = Path(spec).expanduser()
    if path.is_dir():
        _check_options("image_folder", load_image_folder, options, given=("path",))
        return load_image_folder(path, **options)
    what = "is a file, not a directory" if path.exists() else "is neither a registered dataset nor a directory"
    raise DatasetError(
        f"dataset '{spec}' {what}. Give a folder of images, one of: {', '.join(bare_names())}, "
        f"or NAME:PATH with NAME one of: {', '.join(path_names())}"
    )


def _named_path(spec: str) -> tuple[str, str] | None:
    """``NAME:PATH`` -> (NAME, PATH) when NAME is a registered dataset and PATH is not empty; a NAME that is not
    registered is a DatasetError listing the registered names, unless ``spec`` is an existing path."""
    name, sep, where = spec.partition(":")
    if not sep or not name or not where or Path(spec).expanduser().exists():
        return None
    if name not in DATASETS:
        raise DatasetError(
            f"dataset '{spec}': '{name}' is not a registered dataset (registered: {', '.join(DATASETS.names())})"
        )
    return name, where


def path_names() -> list[str]:
    """The registered datasets that take a path (usable as ``NAME:PATH``)."""
    return [name for name in DATASETS.names() if "path" in inspect.signature(DATASETS.get(name)).parameters]


def bare_names() -> list[str]:
    """The registered datasets that can be named alone (``--dataset NAME``): no required option."""
    return [name for name in DATASETS.names() if not _required(DATASETS.get(name))]


def _required(loader: Any) -> list[str]:
    """Names of the loader's parameters that have no default."""
    return [
        p.name
        for p in inspect.signature(loader).parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]


def _check_options(name: str, loader: Any, options: dict[str, Any], given: tuple[str, ...] = ()) -> None:
    """DatasetError unless ``loader(*given, **options)`` binds: no unknown option, no required one missing."""
    params = inspect.signature(loader).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        unknown = sorted(set(options) - set(params))
        if unknown:
            allowed = [p for p in params if p not in given and p != "path"]
            raise DatasetError(f"dataset '{name}' does not take {', '.join(unknown)} (allowed: {', '.join(allowed)})")
    missing = [p for p in _required(loader) if p not in options and p not in given]
    if missing == ["path"]:
        raise DatasetError(
            f"dataset '{name}' needs a folder: give --dataset PATH (a folder of images; "
            f"'{name}' is what a folder is loaded with). Datasets usable by name: "
            f"{', '.join(bare_names()) or 'none'}"
        )
    if missing:
        raise DatasetError(
            f"dataset '{name}' needs {', '.join(missing)}, which --dataset NAME alone cannot "
            f"give. Datasets usable by name: {', '.join(bare_names()) or 'none'}"
        )

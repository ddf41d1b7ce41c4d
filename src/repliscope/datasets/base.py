"""Datasets: an ordered list of samples (id, encoded bytes on demand, label) plus an identity.

A dataset's identity is the sha256 over every sample's id, file bytes and label, so two runs on the same
identity saw exactly the same data. Reading a sample's bytes never decodes it: decoding is the pipeline's
``decode`` op, so a corrupt file is a recorded sample failure, not a dataset failure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from repliscope.registry import Registry


@dataclass(frozen=True)
class Sample:
    """One labelled (or unlabelled: ``label is None``) sample; ``read()`` returns the encoded bytes."""

    id: str
    label: int | None
    read: Callable[[], bytes] = field(repr=False, compare=False)
    location: str = ""


@dataclass
class Dataset:
    """An ordered, immutable collection of samples with provenance."""

    name: str
    samples: Sequence[Sample]
    license: str
    label_rule: str
    description: str = ""
    origin: str = ""
    _identity: str | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def identity(self) -> str:
        """sha256 hex over (id, sha256(bytes), label) of every sample, in order. Reads every file once."""
        if self._identity is None:
            h = hashlib.sha256()
            for s in self.samples:
                h.update(s.id.encode())
                h.update(b"\0")
                h.update(hashlib.sha256(s.read()).digest())
                h.update(str(s.label).encode())
                h.update(b"\n")
            self._identity = h.hexdigest()
        return self._identity

    def describe(self) -> dict[str, Any]:
        labelled = sum(1 for s in self.samples if s.label is not None)
        return {"name": self.name, "identity": self.identity, "num_samples": len(self.samples),
                "num_labelled": labelled, "license": self.license, "label_rule": self.label_rule,
                "origin": self.origin, "description": self.description}


DatasetLoader = Callable[..., Dataset]
"""A registered dataset: called with keyword options (e.g. ``path``, ``label_rule``), returns a Dataset."""

DATASETS: Registry[DatasetLoader] = Registry("dataset")
LABEL_RULES: Registry[Callable[..., Any]] = Registry("label rule")

"""Where a run's sample images come from: the run's own dataset, re-loaded only when it has the record's identity
(a built-in dataset, one registered in the service's registry under the record's name, the origin the units report
re-loads, a VOC segmentation folder); never a path a client gives."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from repliscope.evaluation.record import EvaluationRecord


class SampleImages:
    """sample id -> the sample's encoded image bytes (None when unreadable); ``id in images`` says whether the
    dataset has that sample."""

    def __init__(self, samples: Mapping[str, Any]) -> None:
        self._samples = samples

    def __contains__(self, sample_id: object) -> bool:
        return sample_id in self._samples

    def __call__(self, sample_id: str) -> bytes | None:
        sample = self._samples.get(sample_id)
        if sample is None:
            return None
        try:
            return bytes(sample.read())
        except Exception:  # an unreadable file: the sample id stands alone
            return None


def sample_reader(record: EvaluationRecord, store: Any = None) -> SampleImages | None:
    """The images of the run's samples, from the run's dataset when it re-loads with the record's identity (a
    built-in dataset name, a dataset registered in ``store``'s registry under the record's name, the origin the
    units report re-loads, or a VOC segmentation folder); None when it does not."""
    from repliscope.datasets.base import DATASETS

    data = None
    name = str(record.dataset.get("name", ""))
    try:
        if name in DATASETS:
            from repliscope.datasets.resolve import resolve_dataset

            data = resolve_dataset(name)
        else:
            data = _registered_dataset(record, store) if store is not None else None
            if data is None:
                from repliscope.report.units_sections import source_dataset

                data = source_dataset(record)
            if data is None and record.dataset.get("label_rule") == "voc segmentation masks":
                from repliscope.datasets.voc_seg import load_voc_seg

                data = load_voc_seg(str(record.dataset.get("origin", "")))
    except Exception:  # a dataset that no longer loads: sample ids only
        data = None
    if data is None or data.identity != record.dataset.get("identity"):
        return None
    return SampleImages({s.id: s for s in data.samples})


def _registered_dataset(record: EvaluationRecord, store: Any) -> Any:
    """The dataset registered in ``store`` under the record's dataset name, re-loaded from its spec with the
    record's label rule and sample count; None when no dataset of that name is registered or it does not re-load
    with the record's identity (a folder whose files changed since the run)."""
    from repliscope.datasets.base import LABEL_RULES
    from repliscope.datasets.resolve import resolve_dataset
    from repliscope.store.errors import NotFoundError
    from repliscope.store.service_tables import get_dataset

    try:
        registered = get_dataset(store, str(record.dataset.get("name", "")))
    except NotFoundError:
        return None
    n = record.dataset.get("num_samples")
    limit = int(n) if isinstance(n, int) and n > 0 else None
    rule = record.dataset.get("label_rule")
    rules = [str(rule), None] if isinstance(rule, str) and rule in LABEL_RULES.names() else [None]
    for label_rule in rules:
        try:
            data = resolve_dataset(registered.spec, label_rule, limit=limit)
        except Exception:  # this rule does not load the spec: the next one, or no images
            continue
        if data.identity == record.dataset.get("identity"):
            return data
    return None

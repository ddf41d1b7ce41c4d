"""Task-level effect of a pipeline difference (``--model-effect``): both model inputs of every sample through the
manifest's model on the same runner, compared as :func:`repliscope.diff.task_level.diff_runtimes` compares two runtimes.
A = the manifest's pipeline, B = the candidate's.

Classification: full output vectors, top-1 agreement, flipped samples, exact McNemar on the labelled samples.
Object detection: every named model output value by value (where the shapes agree), both post-processed by the
manifest with the manifest pipeline's geometry of the sample (the candidate's input is taken to be in the same
frame), paired by the detection task (matched fraction, IoU, images that differ, AP delta when the dataset has
ground truth)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from repliscope.datasets.base import Dataset, Sample
from repliscope.diff.task_level import TaskDiffResult, _Acc, _detection_result, _Tally
from repliscope.errors import RepliscopeError
from repliscope.evaluation.record import SamplePrediction
from repliscope.manifest.loader import LoadedManifest

TASKS = ("image_classification", "object_detection")


class ModelEffect:
    """Feed (reference, candidate) input pairs through the model in batches of ``batch_size``."""

    def __init__(
        self,
        loaded: LoadedManifest,
        runtime: str,
        candidate: str,
        dataset: Dataset,
        samples: list[Sample],
        *,
        threads: int = 2,
        batch_size: int = 8,
        cache_dir: Path | None = None,
    ) -> None:
        from repliscope.evaluation.run import RunSettings, batch_limit, prepare

        if loaded.manifest.task not in TASKS:
            raise RepliscopeError(
                f"--model-effect compares the predictions of {' or '.join(TASKS)} manifests; "
                f"{loaded.manifest.name} is {loaded.manifest.task} (compare its model inputs "
                "without --model-effect)"
            )
        self.prepared = prepare(
            loaded, RunSettings(runtime=runtime, threads=threads, batch_size=batch_size, cache_dir=cache_dir)
        )
        self.detection = loaded.manifest.task == "object_detection"
        self.batch_size = batch_limit(self.prepared) or batch_size
        self.dtype = np.dtype(loaded.manifest.inputs[0].dtype)
        self.runtime, self.candidate, self.dataset = runtime, candidate, dataset.name
        truth = (
            replace(dataset, samples=samples)
            if self.detection and dataset.categories and all(s.objects is not None for s in samples)
            else None
        )
        self.truth: Dataset | None = truth
        self.logits = _Acc("model outputs (full vectors)")
        self.scores = _Acc("post-processed scores (full vectors, the manifest's postprocess)")
        self.outputs: dict[str, _Acc] = {}
        self.tally = _Tally()
        self.pairs: list[tuple[SamplePrediction, SamplePrediction]] = []
        self.failed_b: list[str] = []
        self.pending: list[tuple[Sample, np.ndarray, np.ndarray, Any]] = []

    def add(self, sample: Sample, reference: np.ndarray, candidate: np.ndarray | None, geometry: Any = None) -> None:
        if candidate is None:
            self.failed_b.append(sample.id)
            return
        self.pending.append((sample, reference, candidate.astype(self.dtype, copy=False), geometry))
        if len(self.pending) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        batch, self.pending = self.pending, []
        xa, xb = np.stack([r for _, r, _, _ in batch]), np.stack([c for _, _, c, _ in batch])
        if self.detection:
            self._detections(batch, xa, xb)
            return
        runner, pipeline = self.prepared.runner, self.prepared.pipeline
        out_a, out_b = runner.infer(xa), runner.infer(xb)
        post_a, post_b = pipeline.postprocess(out_a), pipeline.postprocess(out_b)
        if post_a.is_probability:
            self.scores.quantity = "probabilities (full vectors, after the manifest's postprocess)"
        for i, (smp, _, _, _) in enumerate(batch):
            self.logits.add(smp.id, out_a[i], out_b[i])
            errs = self.scores.add(smp.id, post_a.scores[i], post_b.scores[i])
            self.tally.add(smp.id, smp.label, int(np.argmax(post_a.scores[i])), int(np.argmax(post_b.scores[i])), errs)

    def _detections(
        self, batch: list[tuple[Sample, np.ndarray, np.ndarray, Any]], xa: np.ndarray, xb: np.ndarray
    ) -> None:
        runner, pipeline, task = self.prepared.runner, self.prepared.pipeline, self.prepared.task
        outs = [runner.infer_outputs(xa), runner.infer_outputs(xb)]
        samples = [smp for smp, _, _, _ in batch]
        for name in outs[0]:
            acc = self.outputs.setdefault(name, _Acc(f"model output '{name}'"))
            for i, smp in enumerate(samples):
                acc.add_if_same_shape(smp.id, outs[0][name][i], outs[1][name][i])
        geometry = [g for _, _, _, g in batch]
        rows = list(range(len(batch)))
        recs = [task.to_samples(pipeline.postprocess(out, geometry=geometry), samples, rows) for out in outs]
        self.pairs.extend(zip(recs[0], recs[1], strict=True))

    def result(self) -> TaskDiffResult:
        self.flush()
        b = f"candidate {self.candidate}"
        note = f"both pipelines' inputs fed to the same {self.runtime} runner"
        if self.detection:
            truth, notes = (
                self.truth,
                [
                    f"{note}; both post-processed by the manifest with the manifest pipeline's "
                    "geometry of each sample, paired by the detection task"
                ],
            )
            if truth is not None:
                truth, _ = self.prepared.task.restrict(truth, self.prepared.class_names)
            return _detection_result(
                "pipelines",
                "manifest pipeline",
                b,
                self.dataset,
                self.pairs,
                truth,
                [a.result() for a in self.outputs.values()],
                [],
                self.failed_b,
                notes,
            )
        agreement, agreements, flips = self.tally.agreement()
        return TaskDiffResult(
            source="pipelines",
            a="manifest pipeline",
            b=b,
            dataset=self.dataset,
            compared=len(self.tally.deltas),
            failed_b=self.failed_b,
            agreement=agreement,
            agreements=agreements,
            flips=flips,
            mcnemar=self.tally.mcnemar(),
            outputs=[self.logits.result(), self.scores.result()],
            per_sample=self.tally.deltas,
            notes=[f"{note}; top-1 = argmax of the post-processed scores"],
        )

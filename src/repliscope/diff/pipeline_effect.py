"""Task-level effect of a pipeline difference (``--model-effect``): both model inputs of every sample through the
manifest's model, compared as :func:`repliscope.diff.task.diff_runtimes` compares two runtimes (full output
vectors, top-1 agreement, flipped samples, exact McNemar on the labelled samples). A = the manifest's pipeline,
B = the candidate's; the same runner infers both."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from repliscope.datasets.base import Sample
from repliscope.diff.task import TaskDiffResult, _Acc, _Tally
from repliscope.errors import RepliscopeError
from repliscope.manifest.loader import LoadedManifest


class ModelEffect:
    """Feed (reference, candidate) input pairs through the model in batches of ``batch_size``."""

    def __init__(self, loaded: LoadedManifest, runtime: str, candidate: str, dataset: str, *, threads: int = 2,
                 batch_size: int = 8, cache_dir: Path | None = None) -> None:
        from repliscope.evaluation.run import RunSettings, batch_limit, prepare

        if loaded.manifest.task != "image_classification":
            raise RepliscopeError(f"--model-effect compares top-1 predictions of an image_classification manifest; "
                                  f"{loaded.manifest.name} is {loaded.manifest.task} (compare its model inputs "
                                  "without --model-effect, or its runs with repliscope diff RUN_A RUN_B)")
        self.prepared = prepare(loaded, RunSettings(runtime=runtime, threads=threads, batch_size=batch_size,
                                                    cache_dir=cache_dir))
        self.batch_size = batch_limit(self.prepared) or batch_size
        self.dtype = np.dtype(loaded.manifest.inputs[0].dtype)
        self.runtime, self.candidate, self.dataset = runtime, candidate, dataset
        self.logits = _Acc("model outputs (full vectors)")
        self.scores = _Acc("post-processed scores (full vectors, the manifest's postprocess)")
        self.tally = _Tally()
        self.failed_b: list[str] = []
        self.pending: list[tuple[Sample, np.ndarray, np.ndarray]] = []

    def add(self, sample: Sample, reference: np.ndarray, candidate: np.ndarray | None) -> None:
        if candidate is None:
            self.failed_b.append(sample.id)
            return
        self.pending.append((sample, reference, candidate.astype(self.dtype, copy=False)))
        if len(self.pending) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        batch, self.pending = self.pending, []
        runner, pipeline = self.prepared.runner, self.prepared.pipeline
        out_a = runner.infer(np.stack([r for _, r, _ in batch]))
        out_b = runner.infer(np.stack([c for _, _, c in batch]))
        post_a, post_b = pipeline.postprocess(out_a), pipeline.postprocess(out_b)
        if post_a.is_probability:
            self.scores.quantity = "probabilities (full vectors, after the manifest's postprocess)"
        for i, (smp, _, _) in enumerate(batch):
            self.logits.add(smp.id, out_a[i], out_b[i])
            errs = self.scores.add(smp.id, post_a.scores[i], post_b.scores[i])
            self.tally.add(smp.id, smp.label, int(np.argmax(post_a.scores[i])), int(np.argmax(post_b.scores[i])),
                           errs)

    def result(self) -> TaskDiffResult:
        self.flush()
        agreement, agreements, flips = self.tally.agreement()
        return TaskDiffResult(
            source="pipelines", a="manifest pipeline", b=f"candidate {self.candidate}", dataset=self.dataset,
            compared=len(self.tally.deltas), failed_b=self.failed_b, agreement=agreement, agreements=agreements,
            flips=flips, mcnemar=self.tally.mcnemar(), outputs=[self.logits.result(), self.scores.result()],
            per_sample=self.tally.deltas,
            notes=[f"both pipelines' inputs fed to the same {self.runtime} runner; top-1 = argmax of the "
                   "post-processed scores"])

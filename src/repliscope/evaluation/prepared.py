"""What a run resolved before its loop (:class:`PreparedRun`): the manifest, the verified artifact, the pipeline,
the runner and the settings, reused by sweeps that run many pipelines on one model. Built by
:func:`repliscope.evaluation.run.prepare`; read by the record builder and the loops."""

from __future__ import annotations

from dataclasses import dataclass

from repliscope.evaluation.engine import BatchInference
from repliscope.evaluation.run_config import RunSettings
from repliscope.manifest.loader import LoadedManifest
from repliscope.ops.pipeline import Pipeline
from repliscope.runtimes.base import ModelArtifact, Runner
from repliscope.tasks.base import Task, get_task


@dataclass
class PreparedRun:
    """Everything resolved before the loop: reused by sweeps that run many pipelines on one model."""

    loaded: LoadedManifest
    artifact: ModelArtifact
    pipeline: Pipeline
    runner: Runner
    settings: RunSettings
    class_names: tuple[str, ...] | None = None

    @property
    def task(self) -> Task:
        """The manifest's task (:mod:`repliscope.tasks`)."""
        return get_task(self.loaded.manifest.task)

    @property
    def inference(self) -> BatchInference:
        """How a batch of this run's prepared inputs becomes records (:class:`BatchInference`): whether its runner
        is asked for named outputs, the post-processing, the task's records."""
        return BatchInference(self.pipeline, self.task, self.runner)

"""The pipeline diff: a candidate pre-processing against the manifest's, stage by stage, with its diagnosis over
the registered pitfalls (``driver``: :func:`~repliscope.diff.pipeline.driver.diff_pipeline`; ``candidate``: loading
the user's pipeline; ``diagnosis``, ``effect``, ``heatmap``)."""

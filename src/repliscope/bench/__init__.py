"""Performance benchmarks with MLPerf LoadGen semantics (``repliscope bench``).

manifest -> :func:`repliscope.evaluation.run.prepare` -> :class:`~repliscope.bench.qsl.QuerySampleLibrary`
(pre-processed before timing) -> a scenario's issue loop (:mod:`~repliscope.bench.scenarios`) through
:class:`~repliscope.bench.sut.QueryIssuer` -> statistics (:mod:`~repliscope.bench.stats`) ->
:class:`~repliscope.bench.record.BenchmarkRecord` -> store / report. Importing this package imports no ML framework.
"""

"""ONNX Runtime's query call (issue 37: the least Python between the session's return and the benchmark's
completion) gives ``infer``'s scores bit for bit, and still refuses a batch ``infer`` refuses."""

from __future__ import annotations

import numpy as np
import pytest

from repliscope.runtimes import Runner
from repliscope.runtimes.errors import BatchError

from .conftest import Images


def test_query_call_gives_infers_scores_and_checks_each_new_batch_shape(
    runners: dict[str, Runner], images: Images
) -> None:
    runner = runners["onnxruntime"]
    call = runner.query_call()
    for batch in (images.x[:1], images.x[3:5], images.x[:1]):  # a shape, another, the first again
        got = call(batch)
        assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == (len(batch), 1000)
        np.testing.assert_array_equal(got, runner.infer(batch))
    strided = images.x[0:4:2]  # not C-contiguous
    np.testing.assert_array_equal(call(strided), runner.infer(np.ascontiguousarray(strided)))
    for _ in range(2):  # refused every time: a refused batch is not remembered as checked
        with pytest.raises(BatchError, match="float64"):
            call(images.x[:1].astype(np.float64))
    with pytest.raises(BatchError, match=r"axis 2 is 100, not 224"):
        call(images.x[:1, :, :100])
    named = runner.query_call(named=True)(images.x[:1])
    assert isinstance(named, dict) and list(named) == list(runner.infer_outputs(images.x[:1]))

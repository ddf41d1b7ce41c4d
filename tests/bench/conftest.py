"""The prepared Lite0 manifest (performance claims added), the foolbox images and their query sample library."""

from __future__ import annotations

from dataclasses import replace

import pytest

from repliscope.bench.qsl import QuerySampleLibrary
from repliscope.datasets import resolve_dataset
from repliscope.evaluation.run import RunSettings, input_shape, prepare
from repliscope.manifest.loader import load_manifest
from repliscope.manifest.schema import ClaimHardware
from tests.bench._fakes import UNIT, Base, perf_claim
from tests.conftest import LITE0


@pytest.fixture(scope="session")
def base() -> Base:
    loaded = load_manifest(LITE0)
    claims = [
        *loaded.manifest.claims,
        perf_claim("latency_p90_ms", 10 * UNIT * 1e3),  # the exact p90 of CYCLE: inside its interval
        perf_claim("latency_p90_ms", 1.0),  # far below: inconsistent
        perf_claim("throughput", 50.0, hardware=ClaimHardware(cpu_model="Some Other CPU", threads=2)),
        perf_claim("latency_p99_ms", 9.0, scenario="server"),
    ]
    loaded = replace(loaded, manifest=loaded.manifest.model_copy(update={"claims": claims}))
    prepared = prepare(loaded, RunSettings(runtime="onnxruntime", threads=1))
    data = resolve_dataset("foolbox_imagenet")
    return prepared, data, QuerySampleLibrary.load(prepared.pipeline, data.samples, input_shape(prepared), False)

"""Loading libdarknet (built with -Ofast) must not leave the process flushing subnormal numbers to zero."""

from __future__ import annotations

import subprocess
import sys

from tests.yolo._assets import need_darknet

PROBE = """
import numpy as np
from repliscope.backends.darknet.lib import load_library
load_library()
print(float(np.float32(1e-40) * np.float32(1.0)), float(np.float64(5e-324) * 1.0))
"""


def test_subnormals_survive_loading_libdarknet() -> None:
    need_darknet()
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    tiny32, tiny64 = (float(v) for v in out.stdout.split())
    assert tiny32 > 0 and tiny64 > 0  # with -Ofast's flush-to-zero left on, both would be 0.0

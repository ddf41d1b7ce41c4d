"""Where repliscope keeps files on this machine: the bottom layer every package may import (no repliscope imports)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def default_cache_dir() -> Path:
    """``$REPLISCOPE_CACHE`` or the user cache directory; holds ONNX exports, conversions and downloads."""
    return Path(os.environ.get("REPLISCOPE_CACHE") or platformdirs.user_cache_dir("repliscope"))

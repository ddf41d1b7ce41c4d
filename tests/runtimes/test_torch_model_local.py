"""The torch runtime's factory resolution from a local folder (``architecture.path``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.backends.torch.loader import resolve_factory
from repliscope.errors import FrameworkError
from repliscope.runtimes.errors import ModelLoadError


def test_factory_from_a_local_folder(tmp_path: Path) -> None:
    (tmp_path / "a2_pkg").mkdir()
    (tmp_path / "a2_pkg" / "__init__.py").write_text("")
    source = "class Net:\n    @staticmethod\n    def build(k=2):\n        return k * 3\n"
    (tmp_path / "a2_pkg" / "nets.py").write_text(source)
    assert resolve_factory("a2_pkg.nets:Net.build", tmp_path)(k=5) == 15


def test_local_factory_errors_name_what_is_wrong(tmp_path: Path) -> None:
    (tmp_path / "a2_broken.py").write_text("raise RuntimeError('boom at import')\n")
    with pytest.raises(FrameworkError, match=r"importing 'a2_broken' failed: RuntimeError: boom at import"):
        resolve_factory("a2_broken:build", tmp_path)
    (tmp_path / "a2_ok.py").write_text("def build_model():\n    return 1\n")
    with pytest.raises(ModelLoadError, match=r"'a2_ok' has no attribute 'build'. Did you mean 'build_model'\?"):
        resolve_factory("a2_ok:build", tmp_path)
    with pytest.raises(FrameworkError, match="a module 'pytest' is already imported from"):
        resolve_factory("pytest:main", tmp_path)

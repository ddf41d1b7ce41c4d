"""The user's own code on their command line: FILE.py:NAME / module:NAME, each failure one line naming the flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from repliscope.errors import RepliscopeError
from repliscope.user_code import load_user_object


def _file(tmp_path: Path, text: str, name: str = "mine.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_file_and_a_module_load(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("VALUE = 41\n")
    path = _file(tmp_path, "from helper import VALUE\nclass Box:\n    answer = VALUE + 1\n")
    assert load_user_object(f"{path}:Box.answer", "--augment") == 42
    assert load_user_object("json:dumps", "--loss")([1]) == "[1]"


@pytest.mark.parametrize(
    ("text", "attr", "message"),
    [
        ("x = 1\n", "y", "has no attribute 'y'"),
        ("def f(:\n", "f", "does not import: SyntaxError"),
        ("raise RuntimeError('no torch here')\n", "f", "does not import: RuntimeError: no torch here"),
        ("x = 1\n", "_hidden", "'_hidden' is a private or special attribute"),
        ("def f(): pass\n", "f.__globals__", "'__globals__' is a private or special attribute"),
        ("import os\n", "os.system", "'os' is a module; name an object in it"),
        ("x = 1\n", "x y", "is not a (dotted) Python name"),
    ],
)
def test_bad_references_are_one_line(tmp_path: Path, text: str, attr: str, message: str) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(RepliscopeError) as info:
        load_user_object(f"{path}:{attr}", "--augment")
    assert message in str(info.value)
    assert len(str(info.value).splitlines()) == 1


def test_missing_file_and_no_colon(tmp_path: Path) -> None:
    with pytest.raises(RepliscopeError, match="no such file"):
        load_user_object(f"{tmp_path / 'absent.py'}:f", "--loss")
    with pytest.raises(RepliscopeError, match=r"give FILE\.py:NAME or module:NAME"):
        load_user_object("nothing", "--loss")
    with pytest.raises(RepliscopeError, match="does not import: ModuleNotFoundError"):
        load_user_object("no_such_module_xyz:f", "--loss")

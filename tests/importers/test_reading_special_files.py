"""Importers read only regular files: a FIFO (or another special file) is refused at once from its ``fstat``,
never opened in a way that waits for a writer (issue 38: `manifest import` of a FIFO said "no such file")."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.importers.base import ConfigImportError
from repliscope.importers.batch import import_folder
from repliscope.importers.reading import read_text

pytestmark = pytest.mark.timeout(30)  # a read that blocked on the FIFO would hang: fail instead

runner = CliRunner(env={"COLUMNS": "200"})


def test_read_text_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigImportError, match=r"config\.json: not a regular file \(a FIFO\)"):
        read_text(fifo)


def test_read_text_refuses_a_socket(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
        with pytest.raises(ConfigImportError, match=r"s\.json: (not a regular file \(a socket\)|cannot read)"):
            read_text(path)


def test_read_text_refuses_a_device_and_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigImportError, match=r"/dev/zero: not a regular file \(a character device\)"):
        read_text(Path("/dev/zero"))
    with pytest.raises(ConfigImportError, match=r"absent\.json: no such file"):
        read_text(tmp_path / "absent.json")


def test_read_text_still_reads_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"a": 1}\n')
    assert read_text(path) == '{"a": 1}\n'


@pytest.mark.parametrize("fmt", ["timm", "mlmodelscope"])
def test_manifest_import_of_a_fifo_says_not_a_regular_file(tmp_path: Path, fmt: str) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    result = runner.invoke(app, ["manifest", "import", fmt, str(fifo)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "not a regular file (a FIFO)" in result.stderr
    assert "no such file" not in result.stderr


def test_manifest_import_of_a_missing_path_still_says_so(tmp_path: Path) -> None:
    result = runner.invoke(app, ["manifest", "import", "timm", str(tmp_path / "gone.json")])
    assert result.exit_code == 2 and "gone.json: no such file or folder" in result.stderr


def test_a_fifo_inside_an_imported_folder_is_skipped_not_waited_on(tmp_path: Path) -> None:
    src = tmp_path / "configs"
    src.mkdir()
    os.mkfifo(src / "config.json")
    out = tmp_path / "out"
    with pytest.raises(Exception, match="no timm files"):  # rglob's is_file() leaves the FIFO out
        import_folder("timm", src, out)
    assert not out.exists()

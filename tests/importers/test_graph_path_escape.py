"""Issue 20 item 2 (importer part): an MLModelScope ``graph_path`` is read under the manifest's path policy.
``../../../../etc/passwd`` was read and its MD5 printed in the error; now it is refused before it is opened."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from repliscope.importers.base import ConfigImportError
from repliscope.importers.batch import import_one

FIX = Path(__file__).parent / "fixtures" / "mlmodelscope" / "caffe" / "BVLC_AlexNet.yml"
REMOTE = "  graph_path: https://raw.githubusercontent.com/BVLC/caffe/master/models/bvlc_alexnet/deploy.prototxt\n"


def _config(tmp_path: Path, graph_path: str) -> Path:
    text = FIX.read_text(encoding="utf-8")
    assert REMOTE in text
    folder = tmp_path / "a" / "b"
    folder.mkdir(parents=True)
    path = folder / "model.yml"
    path.write_text(
        text.replace(REMOTE, f"  graph_path: {graph_path}\n").replace(
            "  weights_path: http://dl.caffe.berkeleyvision.org/bvlc_alexnet.caffemodel\n", ""
        ),
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("graph_path", ["../../../../../../../../etc/passwd", "/etc/passwd", "link/passwd"])
def test_graph_path_outside_the_folder_is_refused_unread(tmp_path: Path, graph_path: str) -> None:
    path = _config(tmp_path, graph_path)
    (path.parent / "link").symlink_to("/etc")
    with pytest.raises(ConfigImportError) as err:
        import_one("mlmodelscope", path)
    message = str(err.value)
    assert "outside the manifest's folder" in message and "model.graph_path" in message, message
    assert hashlib.md5(Path("/etc/passwd").read_bytes()).hexdigest() not in message


def test_graph_path_inside_the_folder_is_still_read(tmp_path: Path) -> None:
    path = _config(tmp_path, "deploy.prototxt")
    (path.parent / "deploy.prototxt").write_bytes(b"name: 'x'\n")
    with pytest.raises(ConfigImportError) as err:  # the fixture's MD5 is AlexNet's, not this file's
        import_one("mlmodelscope", path)
    assert f"MD5 of {path.parent / 'deploy.prototxt'} is" in str(err.value)

"""A SavedModel's ``source.sha256`` covers its whole folder (issue 39 item 3): two SavedModels with the same graph
but other ``variables/`` never share a hash, so one cannot run under the other's manifest."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from repliscope.errors import ChecksumError
from repliscope.manifest.checksums import saved_model_sha256, source_file_sha256
from repliscope.manifest.sources import resolve_source

tf = pytest.importorskip("tensorflow")


def _saved(folder: Path, weights: list[list[float]]) -> Path:
    """A SavedModel ``{'y': x @ w}`` with the given weights; its saved_model.pb path."""

    class M(tf.Module):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(weights)

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x: object) -> dict[str, object]:
            return {"y": tf.matmul(x, self.w)}

    m = M()
    tf.saved_model.save(m, str(folder), signatures={"serving_default": m.serve})
    return folder / "saved_model.pb"


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("savedmodels")
    return _saved(root / "a", [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), _saved(
        root / "b", [[9.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    )


def _resolve(pb: Path, sha: str) -> Path:
    return resolve_source(
        str(pb), base_dir=pb.parent, sha256=sha, cache_dir=pb.parent, allow_outside_paths=True, format="tf_saved_model"
    )


def test_the_hash_covers_the_variables(two: tuple[Path, Path]) -> None:
    a, b = two
    sha_a, files = saved_model_sha256(a)
    assert "saved_model.pb" in files and any(f.startswith("variables/") for f in files)
    assert source_file_sha256(a) == sha_a != saved_model_sha256(b)[0]
    assert hashlib.sha256(a.read_bytes()).hexdigest() != sha_a  # not the graph file's own hash any more


def test_a_savedmodel_with_other_variables_is_refused_under_the_first_ones_hash(two: tuple[Path, Path]) -> None:
    a, b = two
    sha_a = saved_model_sha256(a)[0]
    assert _resolve(a, sha_a) == a
    with pytest.raises(ChecksumError) as err:
        _resolve(b, sha_a)
    assert "variables/" in str(err.value) and sha_a in str(err.value)


def test_swapping_only_the_variables_is_refused(two: tuple[Path, Path], tmp_path: Path) -> None:
    """The graph file kept, the variables of the other model copied in: the folder hash changes."""
    a, b = two
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for f in a.parent.rglob("*"):
        if f.is_file():
            rel = f.relative_to(a.parent)
            src = b.parent / rel if rel.parts[0] == "variables" else f
            (mixed / rel).parent.mkdir(parents=True, exist_ok=True)
            (mixed / rel).write_bytes(src.read_bytes())
    with pytest.raises(ChecksumError):
        _resolve(mixed / "saved_model.pb", saved_model_sha256(a)[0])


def test_a_link_in_the_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"graph")
    (folder / "variables" / "variables.index").symlink_to("/etc/passwd")
    with pytest.raises(ChecksumError, match=r"variables/variables\.index is a link"):
        saved_model_sha256(folder / "saved_model.pb")

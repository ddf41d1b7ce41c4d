"""Reading samples: every file read once and hashed, unreadable files are failed samples with a stable reason,
folder scans never crash (dangling symlinks, FIFOs, folders that cannot be listed, symlink loops)."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from repliscope.datasets import load_image_folder
from repliscope.datasets.base import Dataset, Sample, identity_of, read_file, read_sample
from repliscope.datasets.image_folder import scan_folder
from repliscope.errors import DatasetError, RepliscopeError, SampleError


def write(root: Path, name: str, data: bytes | None = None) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if data is not None else f"bytes of {name}".encode())
    return path


def old_identity(ids: list[str], contents: list[bytes], labels: list[int | None]) -> str:
    """The identity formula before files were read once (pinned: identities of unchanged data must not move)."""
    h = hashlib.sha256()
    for i, data, label in zip(ids, contents, labels, strict=True):
        h.update(i.encode() + b"\0" + hashlib.sha256(data).digest() + str(label).encode() + b"\n")
    return h.hexdigest()


class TestReadFile:
    def test_regular_file(self, tmp_path: Path) -> None:
        assert read_file(write(tmp_path, "a.jpg", b"\xff\xd8abc")) == b"\xff\xd8abc"

    def test_dangling_symlink_names_its_target(self, tmp_path: Path) -> None:
        (tmp_path / "lost.jpg").symlink_to("gone/away.jpg")
        with pytest.raises(SampleError) as info:
            read_file(tmp_path / "lost.jpg")
        assert str(info.value) == "unreadable: dangling symlink (target 'gone/away.jpg' does not exist)"

    def test_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(SampleError) as info:
            read_file(tmp_path / "never.jpg")
        assert str(info.value) == "unreadable: file not found (removed after the folder was listed?)"

    def test_fifo_is_refused_without_blocking(self, tmp_path: Path) -> None:
        os.mkfifo(tmp_path / "pipe.jpg")
        outcome: list[str] = []

        def attempt() -> None:
            try:
                read_file(tmp_path / "pipe.jpg")
            except SampleError as exc:
                outcome.append(str(exc))

        worker = threading.Thread(target=attempt, daemon=True)
        worker.start()
        worker.join(timeout=5)
        assert outcome == ["unreadable: not a regular file (a FIFO)"]

    def test_directory(self, tmp_path: Path) -> None:
        (tmp_path / "dir.jpg").mkdir()
        with pytest.raises(SampleError, match=r"^unreadable: not a regular file \(a directory\)$"):
            read_file(tmp_path / "dir.jpg")


class TestReadSample:
    def test_bytes_and_their_sha256(self) -> None:
        read = read_sample(Sample("a", 1, read=lambda: b"abc"))
        assert read.data == b"abc" and read.error is None
        assert read.fingerprint == hashlib.sha256(b"abc").hexdigest()

    def test_os_error_reason_has_no_path_or_address(self) -> None:
        def deny() -> bytes:
            raise PermissionError(13, "Permission denied", "/secret/place/a.jpg")

        read = read_sample(Sample("a.jpg", 1, read=deny))
        assert read.data is None
        assert read.error == read.fingerprint == "unreadable: Permission denied"

    def test_sample_error_reason_kept(self, tmp_path: Path) -> None:
        (tmp_path / "l.jpg").symlink_to("nowhere.jpg")
        read = read_sample(Sample("l.jpg", 1, read=lambda: read_file(tmp_path / "l.jpg")))
        assert read.error == "unreadable: dangling symlink (target 'nowhere.jpg' does not exist)"


class TestIdentity:
    def test_readable_data_keeps_the_old_formula(self, tmp_path: Path) -> None:
        write(tmp_path, "a_1.jpg", b"one")
        write(tmp_path, "b_2.jpg", b"two")
        ds = load_image_folder(tmp_path)
        expected = old_identity(["a_1.jpg", "b_2.jpg"], [b"one", b"two"], [1, 2])
        assert ds.identity == expected
        fingerprints = [read_sample(s).fingerprint for s in ds.samples]
        assert ds.identity_from(fingerprints) == expected
        assert ds.describe(fingerprints)["identity"] == expected

    def test_unreadable_sample_contributes_its_reason(self, tmp_path: Path) -> None:
        write(tmp_path, "a_1.jpg", b"one")
        (tmp_path / "b_2.jpg").symlink_to("missing.jpg")
        ds = load_image_folder(tmp_path)  # the dangling symlink neither crashes the load nor the identity
        reason = b"unreadable: dangling symlink (target 'missing.jpg' does not exist)"
        h = hashlib.sha256()
        h.update(b"a_1.jpg\0" + hashlib.sha256(b"one").digest() + b"1\n")
        h.update(b"b_2.jpg\0" + reason + b"2\n")
        assert ds.identity == h.hexdigest()
        (tmp_path / "missing.jpg").write_bytes(b"two")  # the link now resolves: the plain formula again
        again = load_image_folder(tmp_path, "filename_index", allow_unlabelled=True)
        assert again.identity == old_identity(
            ["a_1.jpg", "b_2.jpg", "missing.jpg"], [b"one", b"two", b"two"], [1, 2, None]
        )

    def test_fingerprints_must_match_the_samples(self) -> None:
        samples = [Sample("a", 0, read=lambda: b"")]
        with pytest.raises(RepliscopeError, match=r"^2 fingerprints for 1 samples$"):
            identity_of(samples, ["0" * 64, "0" * 64])

    def test_describe_reads_nothing_when_given_fingerprints(self) -> None:
        def boom() -> bytes:
            raise AssertionError("read again")

        ds = Dataset("d", [Sample("a", 0, read=boom)], license="x", label_rule="none")
        d = ds.describe([hashlib.sha256(b"x").hexdigest()])
        assert d["identity"] == old_identity(["a"], [b"x"], [0])


class TestScanFolder:
    def test_dangling_symlinks_fifos_and_ignored_files(self, tmp_path: Path) -> None:
        write(tmp_path, "a_1.jpg")
        (tmp_path / "lost_2.jpg").symlink_to("nowhere.jpg")
        (tmp_path / "notes.txt").symlink_to("nowhere.txt")
        os.mkfifo(tmp_path / "pipe_3.png")
        write(tmp_path, "README.md")
        write(tmp_path, "anim.gif")
        scan = scan_folder(tmp_path, (".jpg", ".png"))
        assert scan.images == ["a_1.jpg", "lost_2.jpg", "pipe_3.png"]
        assert scan.ignored == ["README.md", "anim.gif", "notes.txt"]
        assert scan.unreadable_folders == []

    def test_symlinked_folder_inside_followed_outside_not_and_loop_refused(self, tmp_path: Path) -> None:
        write(tmp_path / "elsewhere", "x.jpg")
        root = tmp_path / "data"
        write(root, "cat/a.jpg")
        (root / "dog").symlink_to(tmp_path / "elsewhere", target_is_directory=True)  # out of the folder (issue 32.6)
        (root / "kitten").symlink_to(root / "cat", target_is_directory=True)  # inside it
        (root / "cat" / "again").symlink_to(root, target_is_directory=True)
        write(root, ".hidden/b.jpg")
        scan = scan_folder(root, (".jpg",))
        assert scan.images == ["cat/a.jpg", "kitten/a.jpg"]
        assert scan.unreadable_folders == [
            "cat/again/ (symlink loop: not followed)",
            "dog (symlink out of the dataset folder: not followed)",
            "kitten/again/ (symlink loop: not followed)",
        ]

    def test_folder_that_cannot_be_listed_is_recorded(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        write(tmp_path, "ok/a.jpg")
        write(tmp_path, "locked/b.jpg")
        real_scandir = os.scandir

        def scandir(path: str | os.PathLike[str]) -> object:  # root cannot chmod its way out: simulate EACCES
            if Path(path).name == "locked":
                raise PermissionError(13, "Permission denied", str(path))
            return real_scandir(path)

        monkeypatch.setattr(os, "scandir", scandir)
        scan = scan_folder(tmp_path, (".jpg",))
        assert scan.images == ["ok/a.jpg"]
        assert scan.unreadable_folders == ["locked/ (Permission denied)"]
        ds = load_image_folder(tmp_path, "subfolders", allow_unlabelled=False)
        assert ds.unreadable_folders == ("locked/ (Permission denied)",)
        assert ds.describe()["unreadable_folders"] == ["locked/ (Permission denied)"]

    def test_root_that_cannot_be_listed(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        def scandir(path: str | os.PathLike[str]) -> object:
            raise PermissionError(13, "Permission denied", str(path))

        monkeypatch.setattr(os, "scandir", scandir)
        assert scan_folder(tmp_path, (".jpg",)).unreadable_folders == ["./ (Permission denied)"]
        with pytest.raises(
            DatasetError,
            match=r"no image files \(\.jpg\) in .*; could not list \./ "
            r"\(Permission denied\)$",
        ):
            load_image_folder(tmp_path, extensions=(".jpg",))


def test_ignored_files_are_in_the_dataset_description(tmp_path: Path) -> None:
    write(tmp_path, "a_1.jpg")
    for name in ("README.md", "anim.gif", "sub/notes.txt"):
        write(tmp_path, name)
    d = load_image_folder(tmp_path).describe()
    assert d["ignored_files"] == ["README.md", "anim.gif", "sub/notes.txt"]
    assert d["num_ignored_files"] == 3 and d["unreadable_folders"] == []

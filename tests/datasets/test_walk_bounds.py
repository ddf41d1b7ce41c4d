"""Issue 32 item 6: a dataset folder walk never leaves the folder (a symlink into /proc, to /etc/passwd, or to a
folder elsewhere is not followed, and listed as such), a symlink loop or a symlink fan cannot hang it, and it stops
at its bounds (entries, depth, time) or when cancelled, with an error naming the bound."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from repliscope.datasets.base import read_file
from repliscope.datasets.image_folder import load_image_folder, scan_folder
from repliscope.datasets.labels import class_folders
from repliscope.datasets.walk import STOP, WalkBounds, WalkLimitError, bounded
from repliscope.errors import SampleError


def hostile_folder(root: Path) -> Path:
    """Two real images, and links out: /proc (endless through /proc/<pid>/root), /etc/passwd named like an image,
    the folder's parent; a loop back to the folder itself."""
    (root / "cats").mkdir(parents=True)
    (root / "cats" / "tabby_3.jpg").write_bytes(b"\xff\xd8 a jpeg")
    (root / "dogs").mkdir()
    (root / "dogs" / "dog_5.jpg").write_bytes(b"\xff\xd8 another")
    (root / "proc").symlink_to("/proc", target_is_directory=True)
    (root / "passwd_1.jpg").symlink_to("/etc/passwd")
    (root / "up").symlink_to(root.parent, target_is_directory=True)
    (root / "cats" / "loop").symlink_to(root, target_is_directory=True)
    return root


def test_links_out_of_the_folder_are_not_followed_and_a_loop_cannot_hang_it(tmp_path: Path) -> None:
    root = hostile_folder(tmp_path / "data")
    start = time.monotonic()
    ds = load_image_folder(root, "filename_index")
    assert time.monotonic() - start < 2
    assert [(s.id, s.label) for s in ds.samples] == [("cats/tabby_3.jpg", 3), ("dogs/dog_5.jpg", 5)]
    assert list(ds.unreadable_folders) == [
        "cats/loop/ (symlink loop: not followed)",
        "passwd_1.jpg (symlink out of the dataset folder: not followed)",
        "proc (symlink out of the dataset folder: not followed)",
        "up (symlink out of the dataset folder: not followed)",
    ]
    assert ds.describe()["unreadable_folders"] == list(ds.unreadable_folders)


def test_a_sample_swapped_for_a_link_out_after_the_listing_is_not_read(tmp_path: Path) -> None:
    root = hostile_folder(tmp_path / "data")
    ds = load_image_folder(root, "filename_index")
    (root / "dogs" / "dog_5.jpg").unlink()
    (root / "dogs" / "dog_5.jpg").symlink_to("/etc/passwd")
    with pytest.raises(SampleError) as info:
        ds.samples[1].read()
    assert str(info.value) == "unreadable: symlink out of the dataset folder (not read)"
    assert ds.samples[0].read() == b"\xff\xd8 a jpeg"
    with pytest.raises(SampleError, match="symlink out of the dataset folder"):
        read_file(root / "passwd_1.jpg", root)


def test_class_folders_leave_out_links_out_of_the_folder(tmp_path: Path) -> None:
    root = hostile_folder(tmp_path / "data")
    (root / "kittens").symlink_to(root / "cats", target_is_directory=True)
    assert class_folders(root) == ["cats", "dogs", "kittens"]


def fan(root: Path, levels: int, width: int) -> Path:
    """``levels`` folders, each with ``width`` symlinks to the next (all inside ``root``): width**levels paths."""
    for i in range(levels):
        folder = root / f"l{i}"
        folder.mkdir(parents=True)
        (folder / f"img_{i}.jpg").write_bytes(b"x")
        if i + 1 < levels:
            for k in range(width):
                (folder / f"n{k}").symlink_to(root / f"l{i + 1}", target_is_directory=True)
    return root


def test_a_symlink_fan_stops_at_the_entry_bound(tmp_path: Path) -> None:
    root = fan(tmp_path / "fan", 10, 6)  # 6**9 paths to the last folder
    start = time.monotonic()
    with bounded(WalkBounds(max_entries=5_000, max_depth=64, max_seconds=None)), pytest.raises(WalkLimitError) as e:
        scan_folder(root, (".jpg",))
    assert time.monotonic() - start < 5
    assert e.value.limit == "entries"
    assert str(e.value) == f"{root} holds more than 5,000 files and folders (walk bound max_entries)"


def test_the_depth_and_time_bounds(tmp_path: Path) -> None:
    deep = tmp_path / "deep"
    deep.joinpath(*[f"d{i}" for i in range(6)]).mkdir(parents=True)
    with pytest.raises(WalkLimitError) as e:
        scan_folder(deep, (".jpg",), WalkBounds(max_entries=100, max_depth=4, max_seconds=None))
    assert (e.value.limit, str(e.value)) == (
        "depth",
        f"{deep} is deeper than 4 levels: not a dataset folder (walk bound max_depth)",
    )
    root = fan(tmp_path / "fan", 12, 6)
    start = time.monotonic()
    with pytest.raises(WalkLimitError) as e:
        scan_folder(root, (".jpg",), WalkBounds(max_entries=10**9, max_depth=64, max_seconds=0.5))
    assert time.monotonic() - start < 3
    assert str(e.value) == f"listing {root} took longer than 0.5 s (walk bound max_seconds)"


def test_a_walk_is_cancelled_by_its_event_and_by_stop(tmp_path: Path) -> None:
    root = fan(tmp_path / "fan", 12, 6)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    start = time.monotonic()
    with pytest.raises(WalkLimitError) as e:
        scan_folder(root, (".jpg",), WalkBounds(10**9, 64, None, cancel=cancel))
    assert e.value.limit == "cancelled" and time.monotonic() - start < 2
    STOP.set()
    try:
        with pytest.raises(WalkLimitError, match=r"listing .* was stopped \(the server is stopping\)"):
            scan_folder(root, (".jpg",))
    finally:
        STOP.clear()
    assert scan_folder(root / "l11", (".jpg",)).images == ["img_11.jpg"]


def test_the_cli_bounds_are_wide_but_finite() -> None:
    from repliscope.datasets.walk import CLI_BOUNDS, current_bounds

    assert current_bounds() == CLI_BOUNDS
    assert (CLI_BOUNDS.max_entries, CLI_BOUNDS.max_depth, CLI_BOUNDS.max_seconds) == (10_000_000, 64, None)

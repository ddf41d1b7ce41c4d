"""Issue 32 item 1: a manifest's ``architecture.factory`` runs no code outside the distribution ``architecture.package``
names. Each hostile manifest would create a sentinel file if its factory were imported or called; each is refused by
``validate`` (check_manifest) AND by what ``evaluate`` runs (resolve_artifact + the torch loader), the field named, and
the sentinel never appears."""

from __future__ import annotations

import pickle
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from repliscope.backends.torch.loader import build_torch_module
from repliscope.errors import FrameworkError
from repliscope.evaluation.artifacts import resolve_artifact
from repliscope.manifest.checks import check_manifest
from repliscope.manifest.code_refs import CodeRefError, resolve_ref
from repliscope.manifest.loader import load_manifest
from tests.conftest import LITE0

LITE0_ARCH = """  factory: efficientnet_lite_pytorch:EfficientNet.from_name
  package: efficientnet-lite-pytorch==0.1.0
  kwargs:
    model_name: efficientnet-lite0
"""


def hostile(tmp_path: Path, block: str) -> Path:
    """The Lite0 example with its architecture block replaced by ``block`` (indented two spaces)."""
    text = LITE0.read_text(encoding="utf-8")
    assert text.count(LITE0_ARCH) == 1
    path = tmp_path / "shared.yaml"
    path.write_text(text.replace(LITE0_ARCH, block), encoding="utf-8")
    return path


def fake_dist(root: Path, name: str, version: str, module: str, files: dict[str, str]) -> Path:
    """An installed distribution ``name`` (dist-info with METADATA, RECORD, top_level.txt) providing ``module``
    in ``root`` (put on sys.path by the caller)."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    (info / "top_level.txt").write_text(module + "\n", encoding="utf-8")
    record = [*files, f"{info.name}/METADATA", f"{info.name}/top_level.txt", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{r},,\n" for r in record), encoding="utf-8")
    return root


@pytest.fixture
def evil(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """(site folder on sys.path holding the distribution ``a32-evil`` 1.0 with module ``a32evil``, sentinel path).
    Importing ``a32evil.boom`` creates the sentinel; ``a32evil`` re-exports os, os.system, eval and a function of
    another module."""
    sentinel = tmp_path / "SENTINEL"
    site = fake_dist(
        tmp_path / "site",
        "a32-evil",
        "1.0",
        "a32evil",
        {
            "a32evil/__init__.py": (
                "import os\nimport subprocess\nfrom os import system\nfrom subprocess import run\n"
                "evaluate = eval\n\ndef build(**kwargs):\n    return kwargs\n"
            ),
            "a32evil/boom.py": f"open({str(sentinel)!r}, 'w').close()\n\ndef build():\n    return 1\n",
        },
    )
    monkeypatch.syspath_prepend(str(site))
    yield site, sentinel
    for name in [m for m in sys.modules if m == "a32evil" or m.startswith("a32evil.")]:
        del sys.modules[name]


def refused_everywhere(path: Path, cache: Path, field: str, message: str) -> None:
    """``validate`` reports ``field`` with ``message``; what ``evaluate`` runs raises the same."""
    errors = check_manifest(path, cache_dir=cache).errors
    assert [e.field for e in errors] == [field], [str(e) for e in errors]
    assert message in str(errors[0])
    with pytest.raises(FrameworkError) as caught:
        build_torch_module(resolve_artifact(load_manifest(path), cache))
    assert message in str(caught.value)
    if isinstance(caught.value, CodeRefError):
        assert caught.value.field == field


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (
            '  factory: os:system\n  package: torch\n  kwargs:\n    command: "touch {sentinel}"\n',
            "module 'os' is not provided by torch",
        ),
        (
            "  factory: subprocess:run\n  package: torch\n  kwargs:\n    args: [touch, {sentinel}]\n",
            "module 'subprocess' is not provided by torch",
        ),
        (
            "  factory: builtins:exec\n  package: torch\n  kwargs:\n    source: open('{sentinel}', 'w')\n",
            "module 'builtins' is not provided by torch",
        ),
        (
            "  factory: torch.hub:load\n  package: torch\n  kwargs:\n    repo_or_dir: {tmp}\n    model: m\n"
            "    source: local\n    trust_repo: true\n",
            "'torch.hub' is part of torch.hub, which loads or compiles code",
        ),
        (
            "  factory: torch:load\n  package: torch\n  kwargs:\n    f: {pickle}\n    weights_only: false\n",
            "'torch.serialization' is part of torch.serialization",
        ),
        (
            "  factory: efficientnet_lite_pytorch.utils:model_zoo.load_url\n"
            "  package: efficientnet-lite-pytorch==0.1.0\n  kwargs:\n    url: file://{pickle}\n",
            "'efficientnet_lite_pytorch.utils.model_zoo' is the module 'torch.utils.model_zoo'",
        ),
    ],
    ids=["os-system", "subprocess-run", "builtins-exec", "torch-hub", "torch-load-pickle", "walk-into-torch"],
)
def test_hostile_factories_are_refused_and_run_nothing(tmp_path: Path, block: str, message: str) -> None:
    sentinel = tmp_path / "SENTINEL"
    hub = tmp_path / "hub"
    hub.mkdir()
    (hub / "hubconf.py").write_text(f"open({str(sentinel)!r}, 'w').close()\ndef m():\n    return 1\n")
    evil_pickle = tmp_path / "evil.pt"
    evil_pickle.write_bytes(pickle.dumps(_Boom(str(sentinel)), protocol=2))
    path = hostile(tmp_path, block.format(sentinel=sentinel, tmp=hub, pickle=evil_pickle))
    refused_everywhere(path, tmp_path / "cache", "architecture.factory", message)
    assert not sentinel.exists()


class _Boom:
    """Unpickling it creates a file (what a hostile weights file would do)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.target, "w"))


def test_a_factory_walking_out_of_its_package_is_refused(evil: tuple[Path, Path], tmp_path: Path) -> None:
    _, sentinel = evil
    cases = {
        "a32evil:os.system": "'a32evil.os' is the module 'os'",
        "a32evil:system": "'a32evil.system' is defined in module 'posix', outside a32-evil 1.0",
        "a32evil:run": "'a32evil.run' is defined in module 'subprocess', outside a32-evil 1.0",
        "a32evil:evaluate": "'a32evil.evaluate' is defined in module 'builtins', outside a32-evil 1.0",
        "a32evil:build.__globals__": "'__globals__' is a private or special attribute",
    }
    for factory, message in cases.items():
        block = f"  factory: {factory}\n  package: a32-evil==1.0\n  kwargs:\n    command: touch {sentinel}\n"
        refused_everywhere(hostile(tmp_path, block), tmp_path / "cache", "architecture.factory", message)
    assert resolve_ref("a32evil:build", package="a32-evil==1.0")(x=1) == {"x": 1}  # its own code is fine
    assert not sentinel.exists()


def test_a_package_that_does_not_provide_the_module_is_refused(evil: tuple[Path, Path], tmp_path: Path) -> None:
    _, sentinel = evil
    block = "  factory: a32evil.boom:build\n  package: efficientnet-lite-pytorch==0.1.0\n  kwargs: {}\n"
    message = "module 'a32evil.boom' is not provided by efficientnet-lite-pytorch 0.1.0 (its modules: "
    refused_everywhere(hostile(tmp_path, block), tmp_path / "cache", "architecture.factory", message)
    assert not sentinel.exists()


def test_a_version_outside_the_constraint_is_refused_before_any_import(evil: tuple[Path, Path], tmp_path: Path) -> None:
    _, sentinel = evil
    block = "  factory: a32evil.boom:build\n  package: a32-evil>=2\n  kwargs: {}\n"
    refused_everywhere(
        hostile(tmp_path, block),
        tmp_path / "cache",
        "architecture.package",
        "needs a32-evil>=2, but a32-evil 1.0 is installed",
    )
    with pytest.raises(CodeRefError) as caught:
        resolve_ref("a32evil.boom:build", package="a32-evil>=2")
    assert caught.value.field == "architecture.package"
    assert not sentinel.exists()


def test_a_module_shadowing_the_package_on_sys_path_is_refused(
    evil: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, sentinel = evil
    shadow = tmp_path / "shadow"
    (shadow / "a32evil").mkdir(parents=True)
    (shadow / "a32evil" / "__init__.py").write_text(f"open({str(sentinel)!r}, 'w').close()\ndef build():\n  pass\n")
    monkeypatch.syspath_prepend(str(shadow))
    with pytest.raises(CodeRefError, match=r"is not a file of a32-evil 1\.0; refusing a module that shadows") as e:
        resolve_ref("a32evil:build", package="a32-evil==1.0")
    assert e.value.field == "architecture.factory"
    assert not sentinel.exists()


def test_without_a_package_the_standard_library_is_never_reachable(tmp_path: Path) -> None:
    sentinel = tmp_path / "SENTINEL"
    for factory in ("os:system", "subprocess:run", "builtins:eval", "shutil:rmtree"):
        with pytest.raises(CodeRefError, match="is not part of any installed distribution"):
            resolve_ref(factory)
    assert not sentinel.exists()


def test_the_real_example_still_resolves_and_builds(tmp_path: Path) -> None:
    assert check_manifest(LITE0, cache_dir=tmp_path).ok
    artifact = resolve_artifact(load_manifest(LITE0), tmp_path)
    assert artifact.architecture is not None
    assert artifact.architecture.package == "efficientnet-lite-pytorch==0.1.0"
    module = build_torch_module(artifact)
    assert type(module).__module__ == "efficientnet_lite_pytorch.model"


@pytest.mark.parametrize("key", ["checkpoint_path", "pretrained_cfg_overlay"])
def test_the_timm_importer_emits_no_file_loading_kwargs(tmp_path: Path, key: str) -> None:
    """timm's create_model(checkpoint_path=...) would torch.load a file named by a downloaded config.json."""
    import json

    from repliscope.importers.base import ConfigImportError
    from repliscope.importers.batch import import_one

    cfg = json.loads((Path(__file__).parents[1] / "importers/fixtures/timm/resnet50.a1_in1k.json").read_text())
    cfg["model_args"] = {"drop_rate": 0.0, key: str(tmp_path / "evil.pt")}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    with pytest.raises(ConfigImportError, match=rf"field 'model_args': {key} would make create_model read a file"):
        import_one("timm", path)
    del cfg["model_args"][key]
    path.write_text(json.dumps(cfg), encoding="utf-8")
    architecture = import_one("timm", path).manifest["architecture"]
    assert (architecture["factory"], architecture["package"].split("==")[0]) == ("timm:create_model", "timm")


def test_command_line_code_flags_follow_the_same_walk_rules(tmp_path: Path) -> None:
    """``diff --candidate`` / ``--pipeline`` name the invoking user's own code, yet private attributes and modules
    reached as attributes are refused the same way."""
    from repliscope.backends.torch.candidate import load_factory
    from repliscope.diff.pipeline.candidate import load_candidate
    from repliscope.errors import RepliscopeError

    own = tmp_path / "port.py"
    own.write_text("import os\n\ndef build():\n    return 1\n")
    assert load_factory(f"{own}:build")() == 1
    with pytest.raises(RepliscopeError, match=r"port\.py\.os' is the module 'os'"):
        load_factory(f"{own}:os.system")
    with pytest.raises(RepliscopeError, match=r"'__globals__' is a private or special attribute"):
        load_factory(f"{own}:build.__globals__")
    with pytest.raises(RepliscopeError, match=r"'_hidden' is a private or special attribute"):
        load_candidate(f"{own}:_hidden")

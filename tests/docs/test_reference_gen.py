"""docs/_gen.py: the reference pages generated from the code name every command, endpoint, op and exit code."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import REPO


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("repliscope_docs_gen", REPO / "docs" / "_gen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_page_has_every_command_and_option(gen: ModuleType) -> None:
    import typer.main

    from repliscope.cli.main import app

    page = gen.cli_reference()
    root = typer.main.get_command(app)
    for name, cmd in root.commands.items():
        assert f"(cli-repliscope-{gen.slug(name)})=" in page
        for sub in getattr(cmd, "commands", {}):
            assert f"`repliscope {name} {sub}`" in page
    evaluate = page[page.index("`repliscope evaluate`") : page.index("`repliscope manifest`")]
    assert "```text\nrepliscope evaluate [OPTIONS] MANIFEST\n```" in evaluate
    assert (
        "- `--dataset <str>`: The data: an image folder, foolbox_imagenet | synthetic_detection, or coco:PATH | "
        "voc_xml:PATH | voc_seg:PATH | dlib_xml:FILE.xml | image_folder:PATH. [default: foolbox_imagenet]"
    ) in evaluate
    assert "- `MANIFEST` (argument, required): Model manifest (YAML)." in evaluate


def test_cli_page_options_are_code_so_they_copy_as_typed(gen: ModuleType) -> None:
    """Sphinx turns a bare ``--x`` into an en dash; every option a help text mentions is a code span instead."""
    page = gen.cli_reference()
    outside_code = re.sub(r"(`+).*?\1", "", page, flags=re.DOTALL)
    assert re.findall(r"(?<![\w-])--[a-z]", outside_code) == []
    assert "(repeatable; `--runtimes` A B C" in page
    assert gen.options_as_code("``--a`` and --b-c.") == "``--a`` and `--b-c`."


def test_docs_keep_dashes_and_quotes_as_typed() -> None:
    conf = (REPO / "docs" / "conf.py").read_text()
    assert re.search(r"^smartquotes = False$", conf, flags=re.MULTILINE)


def test_rest_page_has_every_endpoint(gen: ModuleType) -> None:
    doc = gen.openapi_document()
    page = gen.rest_reference()
    for path, item in doc["paths"].items():
        for method in item:
            assert f"### {method.upper()} `{path}`" in page
            assert f"({gen._op_anchor(method, path)})=" in page
    # every schema a type links to has its section
    for anchor in set(re.findall(r"\]\(#(rest-schema-[a-z0-9-]+)\)", page)):
        assert f"({anchor})=" in page


def test_ops_page_has_every_op_with_its_parameters(gen: ModuleType) -> None:
    import repliscope.ops  # noqa: F401
    from repliscope.ops.base import OPS

    page = gen.ops_reference()
    for name in OPS.names():
        assert f"(op-{gen.slug(name)})=\n## `{name}` ({OPS.get(name).stage})" in page
    resize = page[page.index("## `resize`") : page.index("## `scale`")]
    assert '| `method` | "nearest" \\| "bilinear" \\| "bicubic" \\| "area" \\| "lanczos" | yes |' in resize


def test_manifest_schema_page_links_only_to_its_sections(gen: ModuleType) -> None:
    page = gen.manifest_schema_reference()
    assert "| `claims` | array of [ClaimSpec](#manifest-schema-claimspec) | yes |" in page
    for anchor in set(re.findall(r"\]\(#(manifest-schema-[a-z0-9-]+)\)", page)):
        assert f"({anchor})=" in page


def test_exit_codes(gen: ModuleType) -> None:
    rows = [line for line in gen.exit_codes_reference().splitlines() if line.startswith("| `")]
    assert [row.split("|")[1].strip() for row in rows] == ["`0`", "`1`", "`2`", "`3`", "`130`"]


def test_helpers(gen: ModuleType) -> None:
    assert gen.cell("a | b\n c") == "a \\| b c"
    assert gen.code("x `y`") == "`` x `y` ``"
    assert gen.text(":class:`~repliscope.ops.base.Op` and :func:`repliscope.x.f`") == "`Op` and `repliscope.x.f`"
    assert gen._schema_type({"anyOf": [{"type": "string"}, {"type": "null"}]}) == "string | null"
    assert gen._schema_type({"type": "array", "items": {"type": "integer"}}) == "array of integer"
    assert gen._constraints({"minimum": 1, "default": 8}) == ">= `1`, default `8`"


def test_generate_writes_every_page(gen: ModuleType, tmp_path: Path) -> None:
    written = gen.generate(tmp_path)
    assert sorted(p.name for p in written) == sorted(gen.PAGES)
    assert all(p.read_text(encoding="utf-8").strip() for p in written)


def test_index_lists_every_guide_once_in_a_newcomers_order() -> None:
    """Start → manifest → claims → diffs → tasks → training → service/agents → safety → reference (issue 36 item 10)."""
    index = (REPO / "docs" / "index.md").read_text()
    listed = re.findall(r"^(getting-started|concepts|guides/[\w-]+|reference/[\w-]+)$", index, flags=re.MULTILINE)
    guides = sorted(f"guides/{p.stem}" for p in (REPO / "docs" / "guides").glob("*.md"))
    assert sorted(x for x in listed if x.startswith("guides/")) == guides
    assert len(listed) == len(set(listed))
    order = [
        "getting-started",
        "guides/manifest",
        "guides/pitfalls",
        "guides/pipeline-diff",
        "guides/detection",
        "guides/loss-diff",
        "guides/service",
        "guides/agents-stacks",
        "reference/cli",
    ]
    assert [listed.index(x) for x in order] == sorted(listed.index(x) for x in order)


def test_registries_page_shows_each_pitfall_degree_with_its_allowed_values_and_default(gen: ModuleType) -> None:
    """Issue 35 follow-up: every variant with parameters, each parameter's allowed degrees and default, and the
    notation ``--variant`` takes, from the registry (pitfalls.degrees.pitfall_listing)."""
    page = gen.registries_reference()
    start = page.index("(registries-pitfall-degrees)=")
    section = page[start : page.index("\n## ", start)]
    assert "`--variant 'NAME[PARAMETER=VALUE, ...]'`" in section
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert [row.split("|")[1:3] for row in rows] == [
        [" `center_crop_offset` ", " `offset` "],
        [" `letterbox_fill` ", " `fill` "],
        [" `normalize_before_cast` ", " `steps` "],
        [" `resize_library_swapped` ", " `library` "],
    ]
    assert rows[0].endswith("| [rows, columns], each from -2 to 2, not [0, 0] | [1, 1] |")
    assert rows[2].endswith(" | all of them |")


def test_the_ui_tour_shows_every_tour_screenshot_and_each_exists() -> None:
    """docs/guides/ui-tour.md lists one image per ``TOUR`` name; ``make screenshots`` writes them (issue 36 item 10)."""
    from tests.service.browser_support import TOUR

    tour = (REPO / "docs" / "guides" / "ui-tour.md").read_text()
    shown = re.findall(r"\]\(\.\./images/tour-([\w-]+)\.png\)", tour)
    assert shown == list(TOUR)
    assert all((REPO / "docs" / "images" / f"tour-{name}.png").is_file() for name in shown)

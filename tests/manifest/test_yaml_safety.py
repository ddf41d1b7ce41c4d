"""YAML safety: unsafe tags, alias bombs, oversized files and odd YAML all end in a ManifestError with file:line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from repliscope.errors import ManifestError, ManifestErrors
from repliscope.manifest.loader import MAX_MANIFEST_BYTES, load_manifest
from repliscope.manifest.yaml_lines import MAX_DEPTH, MAX_EXPANDED_NODES
from tests.conftest import LITE0
from tests.manifest.test_loader import line_of, write_variant

BOMB = """\
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def test_python_tag_is_a_manifest_error_with_line(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "license: Apache-2.0", "license: !!python/object/apply:os.system [echo pwned]")
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    e = ei.value
    assert e.line == line_of(p, "!!python") and e.field == "license" and e.file == str(p)
    assert "YAML tag 'tag:yaml.org,2002:python/object/apply:os.system' is not allowed" in str(e)


def test_every_unsafe_tag_is_reported_at_once(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "license: Apache-2.0", "license: !foo Apache-2.0\nextra: !!binary aGk=")
    with pytest.raises(ManifestErrors) as ei:
        load_manifest(p)
    assert [(e.line, e.field) for e in ei.value.errors] == [
        (line_of(p, "!foo"), "license"),
        (line_of(p, "!!binary"), "extra"),
    ]
    assert str(ei.value).startswith("2 problems in the manifest:\n")


def test_explicit_safe_tags_are_fine(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "license: Apache-2.0", "license: !!str Apache-2.0")
    assert load_manifest(p).manifest.license == "Apache-2.0"


def test_billion_laughs_is_refused_fast_with_bounded_memory(tmp_path: Path) -> None:
    p = tmp_path / "bomb.yaml"
    p.write_text(BOMB)
    # in a child process so that a regression (a hang at gigabytes) fails the test instead of the suite;
    # peak memory from VmHWM (per address space: ru_maxrss would carry the forking parent's peak over the exec)
    code = (
        "import re, time; from pathlib import Path; from repliscope.manifest.loader import load_manifest\n"
        "from repliscope.errors import ManifestError\n"
        f"try:\n    load_manifest({str(p)!r})\nexcept ManifestError as e:\n"
        "    print(e)\n"
        "print(re.search(r'VmHWM:\\s+(\\d+) kB', Path('/proc/self/status').read_text()).group(1))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    message, max_rss_kib = out.stdout.strip().splitlines()
    assert message.startswith(f"{p}:") and f"more than {MAX_EXPANDED_NODES} nodes" in message
    assert int(max_rss_kib) < 1_000_000  # < 1 GB (the unguarded walk passed 4.6 GB)


def test_bomb_line_points_into_the_document(tmp_path: Path) -> None:
    p = tmp_path / "bomb.yaml"
    p.write_text(BOMB)
    with pytest.raises(ManifestError, match="billion laughs") as ei:
        load_manifest(p)
    assert ei.value.line is not None and 1 <= ei.value.line <= 9


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "rec.yaml"
    p.write_text("name: &x [*x]\n")
    with pytest.raises(ManifestError, match=f"nested more than {MAX_DEPTH} levels") as ei:
        load_manifest(p)
    assert ei.value.line == 1


def test_small_aliases_still_work(tmp_path: Path) -> None:
    text = LITE0.read_text().replace(
        "    dataset: {name: imagenet-1k, split: val}", "    dataset: &val {name: imagenet-1k, split: val}"
    )
    text = text.replace("  evaluated_on:\n    - {name: imagenet-1k, split: val}", "  evaluated_on:\n    - *val")
    p = tmp_path / "alias.yaml"
    p.write_text(text)
    assert load_manifest(p).manifest.datasets.evaluated_on[0].split == "val"


def test_oversized_manifest_is_refused_before_parsing(tmp_path: Path) -> None:
    p = tmp_path / "big.yaml"
    p.write_text(LITE0.read_text() + "#" * MAX_MANIFEST_BYTES + "\n")
    with pytest.raises(ManifestError, match=r"more than the 1048576 \(1 MiB\) a manifest may have") as ei:
        load_manifest(p)
    assert ei.value.file == str(p)
    ok = tmp_path / "just-under.yaml"
    ok.write_text(LITE0.read_text() + "#" * (MAX_MANIFEST_BYTES - len(LITE0.read_bytes()) - 1) + "\n")
    assert ok.stat().st_size == MAX_MANIFEST_BYTES
    assert load_manifest(ok).manifest.name == "efficientnet-lite0"


@pytest.mark.parametrize(
    ("replacement", "message"),
    [
        ("<<: {task: image_classification}", "'<<' merge keys are not supported"),
        ("? [a, b]\n: 1", "a key must be a string, got 'a sequence'"),
        ("yes: 1", "a key must be a string, got 'yes' (quote it in YAML)"),
        ("extra: !!int abc", "invalid YAML value: invalid literal for int()"),
        ("extra: !!timestamp 2024-13-45", "invalid YAML value: month must be in 1..12"),
    ],
)
def test_odd_yaml_is_a_manifest_error(tmp_path: Path, replacement: str, message: str) -> None:
    p = write_variant(tmp_path, "license: Apache-2.0", f"license: Apache-2.0\n{replacement}")
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    assert message in str(ei.value) and ei.value.line is not None and ei.value.file == str(p)


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "deep.yaml"
    p.write_text("name: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ManifestError, match="nested more than 32 levels"):
        load_manifest(p)
    p.write_text("name: " + "[" * 40 + "]" * 40 + "\n")
    with pytest.raises(ManifestError, match="nested more than 32 levels") as ei:
        load_manifest(p)
    assert ei.value.line == 1


def test_two_documents_are_refused(tmp_path: Path) -> None:
    p = tmp_path / "two.yaml"
    p.write_text(LITE0.read_text() + "---\nname: other\n")
    with pytest.raises(
        ManifestError,
        match=r"malformed YAML: expected a single document in the stream, "
        r"but found another document",
    ) as ei:
        load_manifest(p)
    assert ei.value.line == line_of(p, "---")

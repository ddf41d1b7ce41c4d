"""Issue 20 (items 5, 11, 14 loader part): hostile manifests are refused fast, naming file, line, field, limit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repliscope.errors import ManifestError, ManifestErrors
from repliscope.manifest.limits import check_data, check_numbers, read_limited
from repliscope.manifest.loader import load_manifest
from repliscope.manifest.yaml_lines import MAX_NODES
from tests.conftest import LITE0
from tests.manifest.test_loader import line_of, write_variant


@pytest.mark.parametrize(
    ("old", "new", "field", "shown"),
    [
        ("value: 127.0", "value: .nan", "preprocess[4].value", "nan"),
        ("value: 128.0", "value: .inf", "preprocess[5].value", "inf"),
        ("value: 128.0", "value: -.Inf", "preprocess[5].value", "-inf"),
        ("value: 127.0", "value: 1.0e+400", "preprocess[4].value", "inf"),
        ("value: 75.1", "value: .nan", "claims[0].value", "nan"),
    ],
)
def test_non_finite_numbers_are_refused(tmp_path: Path, old: str, new: str, field: str, shown: str) -> None:
    p = write_variant(tmp_path, old, new)
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    assert ei.value.errors == [ei.value] or isinstance(ei.value, ManifestErrors)
    (err,) = ei.value.errors  # one error per field: the schema/op errors of that field are not repeated
    assert (err.file, err.line, err.field) == (str(p), line_of(p, new), field)
    assert str(err).endswith(
        f"{shown} is not a finite number; every number of a manifest must be finite (NaN "
        "and infinity, or a value like 1e400 that overflows to it, are refused)"
    )


def test_huge_integer_is_refused_with_the_limit(tmp_path: Path) -> None:
    p = write_variant(tmp_path, "    size: 256\n", "    size: " + "9" * 300 + "\n")
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    (err,) = ei.value.errors
    assert err.field == "preprocess[1].size" and err.line == line_of(p, "9" * 300)
    assert "an integer of 300 digits is out of range (at most 9,223,372,036,854,775,807" in str(err)


def test_600_kb_manifest_is_refused_fast_naming_the_value_count(tmp_path: Path) -> None:
    """A 600 KB upload took 19.7 s and was blamed on aliases it did not have (a flow list of 150 000 items)."""
    text = LITE0.read_text().replace("shape: [-1, 3, 224, 224]", "shape: [" + ", ".join(["1"] * 200_000) + "]")
    p = tmp_path / "big.yaml"
    p.write_text(text)
    assert 550_000 < p.stat().st_size < 1 << 20
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    assert "alias" not in str(ei.value)
    assert f"the document has more than {MAX_NODES} values" in str(ei.value)
    assert ei.value.line == line_of(p, "shape: [")


def test_long_scalar_manifest_loads_fast(tmp_path: Path) -> None:
    """A 600 KB description (few values) is allowed and parsed by libyaml in well under a second."""
    p = write_variant(tmp_path, "license: Apache-2.0", "license: '" + "a " * 300_000 + "'")
    assert load_manifest(p).manifest.license.startswith("a a ")


def test_check_data_for_importers(tmp_path: Path) -> None:
    """The public limits work on data from any parser (a JSON config of an importer)."""
    deep: list = []
    inner = deep
    for _ in range(10_000):
        inner.append([])
        inner = inner[0]
    with pytest.raises(ManifestError, match=r"nested more than 32 levels deep \(yaml_depth\)"):
        check_data(deep, "cfg.json")
    with pytest.raises(ManifestError, match=r"more than 10,000 values \(yaml_nodes\)"):
        check_data({"x": list(range(20_000))}, "cfg.json")
    with pytest.raises(ManifestError) as ei:
        check_data(json.loads('{"input_size": [3, 1' + "0" * 400 + ', 224], "std": [NaN, 1, 1]}'), "cfg.json")
    assert sorted(str(e.field) for e in ei.value.errors) == ["input_size[1]", "std[0]"]
    assert check_numbers({"a": [1.5, True, 2**62]}, "f") == []
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(40 << 20)  # sparse: nothing is read
    with pytest.raises(ManifestError, match=r"41,943,040 bytes, more than the 1,048,576-byte limit"):
        read_limited(big)
    assert read_limited(LITE0) == LITE0.read_bytes()


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        (
            "    size: 256\n",
            "    size: 40000\n",
            "preprocess[1].size",
            "'resize' makes an image with a shorter side of 40000 (at least 1,600,000,000 pixels), more than the "
            "89,478,485-pixel limit (max_pixels, $REPLISCOPE_MAX_PIXELS)",
        ),
        (
            "    size: 224\n",
            "    size: [224, 1000000]\n    fill: 0\n",
            "preprocess[2].size",
            "'center_crop' makes a 1000000x224 image (at least 224,000,000 pixels), more than the 89,478,485-pixel "
            "limit (max_pixels, $REPLISCOPE_MAX_PIXELS)",
        ),
        (
            "    channels: RGB\n",
            "    channels: RGB\n    max_pixels: 1000000000000\n",
            "preprocess[0].max_pixels",
            "1,000,000,000,000 is above the 89,478,485-pixel limit (max_pixels, $REPLISCOPE_MAX_PIXELS)",
        ),
        (
            "shape: [-1, 1000]",
            "shape: [-1, 1000000000, 1000000000]",
            "outputs[0].shape",
            "one sample of logits (float32 [-1, 1000000000, 1000000000]) is 4,000,000,000,000,000,000 bytes, more than "
            "the 2,147,483,648-byte tensor budget (tensor_bytes, $REPLISCOPE_TENSOR_BYTES)",
        ),
        ("shape: [-1, 1000]", "shape: [-1, 0]", "outputs[0].shape", "axis size 0: an axis is a positive size or -1"),
    ],
)
def test_unbounded_sizes_are_refused_naming_the_limit(
    tmp_path: Path, old: str, new: str, field: str, message: str
) -> None:
    """``resize size: 40000`` validated (and one sample went past 9 GB); MLModelScope's 1e9 x 1e9 outputs too."""
    p = write_variant(tmp_path, old, new)
    with pytest.raises(ManifestError) as ei:
        load_manifest(p)
    key = field.rsplit(".", 1)[-1]
    line = line_of(p, next(ln.strip() for ln in new.splitlines() if ln.strip().startswith(key + ":")))
    assert [str(e) for e in ei.value.errors if e.field == field and message in str(e) and e.line == line]


def test_the_pixel_limit_follows_its_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = write_variant(tmp_path, "    size: 256\n", "    size: 4000\n")
    assert load_manifest(p).manifest.name == "efficientnet-lite0"
    monkeypatch.setenv("REPLISCOPE_MAX_PIXELS", "10_000_000")
    with pytest.raises(ManifestError, match="more than the 10,000,000-pixel limit"):
        load_manifest(p)
    monkeypatch.setenv("REPLISCOPE_MAX_PIXELS", "lots")
    with pytest.raises(Exception, match=r"REPLISCOPE_MAX_PIXELS='lots': max_pixels must be a positive integer"):
        load_manifest(p)


def test_labels_file_over_the_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from repliscope.manifest.labels import class_names_of
    from repliscope.manifest.schema import LabelsSpec

    (tmp_path / "labels.txt").write_text("".join(f"class {i}\n" for i in range(20)))  # 190 bytes
    spec = LabelsSpec(source="labels.txt", num_classes=20)

    def error(message: str, at: tuple[str | int, ...], allowed: list[str] | None) -> ManifestError:
        return ManifestError(message, file="m.yaml", field=".".join(map(str, at)))

    assert len(class_names_of(spec, tmp_path, tmp_path, error)) == 20
    monkeypatch.setenv("REPLISCOPE_LABELS_FILE_BYTES", "100")
    with pytest.raises(ManifestError) as ei:
        class_names_of(spec, tmp_path, tmp_path, error)
    assert str(ei.value) == (
        "m.yaml: field 'labels.source': the label file is over the 100-byte limit "
        "(labels_file_bytes, $REPLISCOPE_LABELS_FILE_BYTES)"
    )


def test_the_safe_inputs_guide_lists_every_limit() -> None:
    """docs/guides/safe-inputs.md carries repliscope.limits.markdown_table() verbatim (regenerate it on a change)."""
    from repliscope.limits import markdown_table

    page = (Path(__file__).parents[2] / "docs" / "guides" / "safe-inputs.md").read_text()
    block = page.split("<!-- limits-table:start -->\n", 1)[1].split("<!-- limits-table:end -->", 1)[0]
    assert block == markdown_table()


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=3), children, max_size=4),
    max_leaves=60,
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(json_values)
def test_check_data_property(data: object) -> None:
    """Any JSON-like value: check_data returns or raises ManifestError; a non-finite float or an integer beyond
    64 bits anywhere is always refused, naming that field."""
    bad = _bad_numbers(data, ())
    try:
        check_data(data, "cfg.json")
    except ManifestError as exc:
        fields = [e.field or "" for e in exc.errors]
        assert bad or "nested" in str(exc) or "values" in str(exc), str(exc)
        assert not bad or set(fields) <= set(bad) | {""}
        return
    assert not bad


def _bad_numbers(value: object, at: tuple[str | int, ...]) -> list[str]:
    from repliscope.manifest.yaml_lines import format_path

    if isinstance(value, bool):
        return []
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return [format_path(at)]
    if isinstance(value, int) and abs(value) > 2**63 - 1:
        return [format_path(at)]
    if isinstance(value, dict):
        return [f for k, v in value.items() for f in _bad_numbers(v, (*at, str(k)))]
    if isinstance(value, list):
        return [f for i, v in enumerate(value) for f in _bad_numbers(v, (*at, i))]
    return []

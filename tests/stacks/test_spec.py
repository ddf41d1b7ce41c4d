"""Stack specs: canonical text (equivalent specs are equal), ``current``, and one clear error per refused input."""

from __future__ import annotations

import pytest

from repliscope.stacks.spec import StackError, parse_spec


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("onnxruntime==1.20.1", "onnxruntime==1.20.1"),
        ("numpy<2 onnxruntime==1.20.1", "numpy<2 onnxruntime==1.20.1"),
        ("  ONNXRuntime == 1.20.1   NumPy <2 ", "numpy<2 onnxruntime==1.20.1"),
        ("numpy<2,>=1.26 onnx_runtime==1.20.1", "numpy<2,>=1.26 onnx-runtime==1.20.1"),
        ("onnxruntime[Foo,bar]>=1.18", "onnxruntime[bar,foo]>=1.18"),
        ("numpy; python_version >= '3.11'", 'numpy;python_version >= "3.11"'),
        ("onnxruntime onnx==1.17", "onnx==1.17 onnxruntime"),
    ],
)
def test_canonical_text(text: str, canonical: str) -> None:
    spec = parse_spec(text)
    assert spec.text == canonical and str(spec) == canonical
    assert parse_spec(spec.text) == spec  # canonical text parses to itself


def test_names_and_current() -> None:
    assert parse_spec("onnxruntime==1.20.1 numpy<2").names == ("numpy", "onnxruntime")
    for text in ("current", " Current "):
        spec = parse_spec(text)
        assert spec.is_current and spec.text == "current" and spec.requirements == ()
    assert not parse_spec("onnxruntime").is_current


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty stack spec"),
        ("onnx!runtime", "'onnx!runtime' is not a valid PEP 508 requirement"),
        ("-e /work/main", "'-e': pip options"),
        ("--index-url=https://x.org", "pip options"),
        ("https://example.org/onnxruntime-1.20.1-cp311.whl", "URLs are not allowed"),
        ("onnxruntime @ https://example.org/x.whl", "URLs are not allowed"),
        ("./wheels/onnxruntime-1.20.1.whl", "local paths and archives are not allowed"),
        ("/tmp/pkg", "local paths"),
        ("onnxruntime-1.20.1.tar.gz", "local paths and archives"),
        ("onnxruntime==1.20.1 ONNXRuntime<2", "names 'onnxruntime' twice"),
    ],
)
def test_refused(text: str, message: str) -> None:
    with pytest.raises(StackError) as exc:
        parse_spec(text)
    assert message in str(exc.value)

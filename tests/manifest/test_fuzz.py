"""Fuzzing: random edits of the example manifests either load or raise ManifestError with a file and a line.

Derandomized (a fixed sequence of examples, reproducible in CI) and bounded (200 examples, a few seconds).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from repliscope.errors import ManifestError
from repliscope.manifest.loader import load_manifest
from tests.conftest import EXAMPLES

SOURCES = [p.read_text() for p in sorted(EXAMPLES.glob("*.yaml"))]
SNIPPETS = [
    "!!python/object/apply:os.system [ls]",
    "!foo",
    "!!binary aGk=",
    "&a",
    "*a",
    "*missing",
    "<<: *a",
    "&b [*b]",
    "{",
    "]",
    ": :",
    "- ",
    "\t",
    "'",
    '"',
    "!!int x",
    "? [1]",
    "0.751",
    "-1",
    "null",
    "~",
    "yes",
    "1e999",
    ".nan",
    ".inf",
    "-.inf",
    "1.0e+400",
    "9" * 40,
    "[" * 40,
    "CHANGE-ME",
    "../../etc/passwd",
    "/etc/passwd",
    "v1.0.0",
    "01.0.0",
]

Mutation = tuple[str, int, int, str]
mutation = st.tuples(
    st.sampled_from(["delete", "duplicate", "char", "swap", "insert", "indent", "dedent", "truncate", "replace"]),
    st.integers(min_value=0, max_value=10_000),
    st.integers(min_value=0, max_value=10_000),
    st.one_of(st.sampled_from(SNIPPETS), st.text(min_size=1, max_size=3)),
)


def mutate(text: str, edits: list[Mutation]) -> str:
    lines = text.splitlines()
    for kind, a, b, snippet in edits:
        if not lines:
            break
        i, j = a % len(lines), b % len(lines)
        if kind == "delete":
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "char" and lines[i]:
            k = b % len(lines[i])
            lines[i] = lines[i][:k] + snippet[0] + lines[i][k + 1 :]
        elif kind == "swap" and ":" in lines[i] and ":" in lines[j]:
            (ki, vi), (kj, vj) = lines[i].split(":", 1), lines[j].split(":", 1)
            lines[i], lines[j] = f"{ki}:{vj}", f"{kj}:{vi}"
        elif kind == "insert":
            k = b % (len(lines[i]) + 1)
            lines[i] = lines[i][:k] + snippet + lines[i][k:]
        elif kind == "indent":
            lines[i] = " " * (1 + b % 4) + lines[i]
        elif kind == "dedent":
            lines[i] = lines[i][1 + b % 4 :] if lines[i][:1] == " " else lines[i]
        elif kind == "truncate":
            lines = lines[: i + 1]
            lines[-1] = lines[-1][: b % (len(lines[-1]) + 1)]
        elif kind == "replace" and ":" in lines[i]:
            lines[i] = lines[i].split(":", 1)[0] + ": " + snippet
    return "\n".join(lines) + "\n"


@settings(
    max_examples=200, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(source=st.sampled_from(SOURCES), edits=st.lists(mutation, min_size=1, max_size=4))
def test_mutated_manifests_fail_only_with_located_manifest_errors(source: str, edits: list[Mutation]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzzed.yaml"
        path.write_text(mutate(source, edits), encoding="utf-8")
        try:
            load_manifest(path)
        except ManifestError as exc:
            for err in exc.errors:
                assert err.file == str(path), str(err)
                assert err.line is not None and err.line >= 1, str(err)
                assert str(err).startswith(f"{path}:{err.line}: "), str(err)

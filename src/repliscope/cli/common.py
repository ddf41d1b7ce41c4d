"""Option types and helpers shared by every command module (the CLI layer only)."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn

import typer

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="SQLAlchemy URL (default: SQLite in the user data directory, or $REPLISCOPE_DB)"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]

DATASET_NAMES = ("foolbox_imagenet", "synthetic_detection")
"""The registered datasets named alone (``--dataset NAME``), as :func:`repliscope.datasets.resolve.bare_names`."""
DATASET_SCHEMES = (
    ("coco", "PATH"),
    ("voc_xml", "PATH"),
    ("voc_seg", "PATH"),
    ("dlib_xml", "FILE.xml"),
    ("image_folder", "PATH"),
)
"""The registered datasets given a path (``--dataset NAME:PATH``, :func:`repliscope.datasets.resolve.path_names`),
with what the path is. Static copies, like :mod:`repliscope.cli.label_rules`: reading the registry costs every
loader's import at each start of the command line; ``tests/cli/test_help_registries.py`` compares them with it."""


def runtime_help(
    default: str | None = "the manifest's native one: torch for a torch source, onnxruntime for an ONNX one, ...",
) -> str:
    """``--runtime``'s help: every registered runtime (:func:`repliscope.backends.runtime_names`) and the default
    (None: no default to name)."""
    from repliscope.backends import runtime_names

    return " | ".join(runtime_names()) + (f" (default: {default})" if default else "")


def dataset_help(what: str = "The data") -> str:
    """``--dataset``'s help: an image folder, every dataset named alone and every ``NAME:PATH`` scheme."""
    schemes = " | ".join(f"{name}:{arg}" for name, arg in DATASET_SCHEMES)
    return f"{what}: an image folder, {' | '.join(DATASET_NAMES)}, or {schemes}."


def fail(exc: Exception) -> NoReturn:
    """Print ``error: <exc>`` to stderr and exit 2 (bad input: the message says what is wrong and allowed)."""
    print(f"error: {exc}", file=sys.stderr)
    raise typer.Exit(code=2)


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


_TF_INFO = re.compile(
    r"^(I\d{4} [\d:.]+ +\d+ \S+:\d+\] |WARNING: All log messages before "
    r"absl::InitializeLog\(\) is called are written to STDERR)"
)
"""TensorFlow's start-up noise: absl-format INFO lines (the oneDNN banner, CPU feature notes) and absl's
warning that logging is not initialised. Warnings and errors of TensorFlow (W/E/F lines) are kept."""


def quiet_keras() -> None:
    """Import Keras/TensorFlow (``import_keras``: TF_CPP_MIN_LOG_LEVEL=2 before the import) with the C-level
    stderr captured, and print back what is not start-up noise (:data:`_TF_INFO`): TensorFlow 2.21 logs its
    oneDNN banner through absl before TF_CPP_MIN_LOG_LEVEL applies. Imports once; later imports are silent."""
    from repliscope.convert.keras_target import import_keras

    if "tensorflow" in sys.modules:
        import_keras()
        return
    with _filtered_stderr(_TF_INFO):
        import_keras()


@contextmanager
def _filtered_stderr(noise: re.Pattern[str]) -> Iterator[None]:
    """Redirect file descriptor 2 (C libraries write there) to a temporary file; afterwards write its lines
    that do not match ``noise`` to ``sys.stderr``."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [
                ln for ln in captured.read().decode("utf-8", "replace").splitlines(keepends=True) if not noise.match(ln)
            ]
            if kept:
                sys.stderr.write("".join(kept))


def flag_of(field: str) -> str:
    """The command-line flag of a run option (``evaluated_as`` -> ``--as``)."""
    return "--as" if field == "evaluated_as" else "--" + field.replace("_", "-")

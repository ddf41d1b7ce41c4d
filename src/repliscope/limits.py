"""Every size limit repliscope applies to untrusted input, in one place (documented in docs/guides/safe-inputs.md).

Each :class:`Limit` has a default and, where a deployment may need another value, an environment variable that
changes it (read at each check, so a server's setting applies without a restart of the import). A value that is
not a positive integer is an error naming the variable, never a silent fallback.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from repliscope.errors import RepliscopeError


@dataclass(frozen=True)
class Limit:
    """A named bound: ``default`` (in ``unit``), overridable by the environment variable ``env`` (or fixed)."""

    name: str
    default: int
    unit: str
    what: str
    env: str | None = None

    @property
    def value(self) -> int:
        """The limit in force: ``$env`` when set (a positive integer), else ``default``."""
        raw = os.environ.get(self.env) if self.env else None
        if raw is None or raw.strip() == "":
            return self.default
        try:
            value = int(raw.strip().replace("_", ""))
        except ValueError:
            value = 0
        if value <= 0:
            raise RepliscopeError(f"{self.env}={raw!r}: {self.name} must be a positive integer ({self.unit})")
        return value

    def describe(self) -> str:
        """``name`` = value unit (what; set by $ENV)."""
        setting = f"; set with ${self.env}" if self.env else "; fixed"
        return f"{self.name} = {self.value:,} {self.unit} ({self.what}{setting})"


MANIFEST_BYTES = Limit("manifest_bytes", 1 << 20, "bytes", "size of a manifest or imported config file")
YAML_NODES = Limit("yaml_nodes", 10_000, "values", "scalars, lists and mappings written in one document")
YAML_EXPANDED_NODES = Limit("yaml_expanded_nodes", 10_000, "nodes", "nodes of a document with every alias expanded")
YAML_DEPTH = Limit("yaml_depth", 32, "levels", "nesting of lists and mappings")
MAX_INT = Limit("max_int", (1 << 63) - 1, "", "largest absolute integer in a manifest (64-bit)")

MAX_PIXELS = Limit(
    "max_pixels",
    89_478_485,
    "pixels",
    "width x height an op may produce (decode: of the file, per op `max_pixels`; resize, crop, "
    "letterbox: of their output)",
    "REPLISCOPE_MAX_PIXELS",
)
TENSOR_BYTES = Limit(
    "tensor_bytes",
    1 << 31,
    "bytes",
    "one model input or output tensor: elements per sample x batch x dtype size",
    "REPLISCOPE_TENSOR_BYTES",
)
SAMPLE_FILE_BYTES = Limit(
    "sample_file_bytes",
    256 << 20,
    "bytes",
    "one dataset file (image) read, checked with fstat before reading",
    "REPLISCOPE_SAMPLE_FILE_BYTES",
)
LABELS_FILE_BYTES = Limit("labels_file_bytes", 16 << 20, "bytes", "a labels text file", "REPLISCOPE_LABELS_FILE_BYTES")
DOWNLOAD_BYTES = Limit(
    "download_bytes",
    2 << 30,
    "bytes",
    "one `download: true` / `--download` fetch, checked while streaming",
    "REPLISCOPE_DOWNLOAD_BYTES",
)

ALL = (
    MANIFEST_BYTES,
    YAML_NODES,
    YAML_EXPANDED_NODES,
    YAML_DEPTH,
    MAX_INT,
    MAX_PIXELS,
    TENSOR_BYTES,
    SAMPLE_FILE_BYTES,
    LABELS_FILE_BYTES,
    DOWNLOAD_BYTES,
)
"""Every limit, in the order the safe-inputs guide lists them."""

DOWNLOAD_ALLOW_HOSTS_ENV = "REPLISCOPE_DOWNLOAD_ALLOW_HOSTS"
"""Comma-separated host names or CIDR networks a download may reach although they are private/loopback/link-local
(an admin's allow-list, e.g. an internal mirror ``10.0.0.0/8`` or ``models.internal``)."""


def markdown_table() -> str:
    """The limits as the Markdown table of docs/guides/safe-inputs.md (defaults, not the environment's values;
    a test keeps the page equal to this)."""
    rows = ["| limit | default | what it bounds | setting |", "| --- | --- | --- | --- |"]
    for limit in ALL:
        default = f"{limit.default:,} {limit.unit}".strip()
        setting = f"`${limit.env}`" if limit.env else "fixed"
        rows.append(f"| `{limit.name}` | {default} | {limit.what} | {setting} |")
    return "\n".join(rows) + "\n"

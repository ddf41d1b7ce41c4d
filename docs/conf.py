"""Sphinx configuration of the repliscope docs (MyST markdown, the furo theme).

Build with ``make docs`` (``sphinx-build -W --keep-going -n -b html docs docs/_build/html``): warnings are errors
and ``-n`` reports every internal reference that does not resolve. The reference pages are generated from the
code by :mod:`_gen` before the sources are read. Nothing is fetched from the network: no intersphinx, no CDN.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _gen  # noqa: E402

from repliscope import __version__  # noqa: E402

_gen.generate()

project = "repliscope"
author = "the repliscope authors"
copyright = "the repliscope authors"
release = version = __version__

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "reference/_generated", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
# no typographic quotes or dashes: commands and options in prose are copied as typed ("--x", never "–x")
smartquotes = False

html_theme = "furo"
html_title = f"repliscope {release}"
html_static_path: list[str] = []
html_show_sourcelink = False

# broken internal references are errors (-n -W); http(s) links are not checked (CI has no internet)
nitpicky = True
linkcheck_ignore = [r"https?://.*"]

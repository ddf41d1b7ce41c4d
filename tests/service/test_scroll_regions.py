"""Every sideways-scrolling region of the web pages is reachable from the keyboard (axe's
``scrollable-region-focusable``; issue 36 item 9): a ``.scroll`` box is focusable, so arrow keys scroll it."""

from __future__ import annotations

import re
from pathlib import Path

TEMPLATES = Path(__file__).parents[2] / "src" / "repliscope" / "service" / "web" / "templates"


def test_every_scroll_box_of_every_template_is_focusable() -> None:
    boxes = [
        (path.name, tag)
        for path in sorted(TEMPLATES.glob("*.html"))
        for tag in re.findall(r"<div\b[^>]*\bclass=\"[^\"]*\bscroll\b[^\"]*\"[^>]*>", path.read_text())
    ]
    assert len(boxes) >= 40
    assert [(name, tag) for name, tag in boxes if 'tabindex="0"' not in tag] == []

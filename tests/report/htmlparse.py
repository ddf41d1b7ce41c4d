"""A small stdlib-only HTML walker for the report tests: ids, images, external references, table cells."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

_VOID = {"img", "br", "meta", "link", "hr", "input", "source"}


@dataclass
class Table:
    id: str
    rows: list[list[str]] = field(default_factory=list)
    row_attrs: list[dict[str, str]] = field(default_factory=list)


class ReportParser(HTMLParser):
    """Collects element ids, <img> srcs/alts, script/link/style references, text, and every table's body cells
    (cell text with whitespace collapsed)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: list[str] = []
        self.images: list[dict[str, str]] = []
        self.scripts: list[dict[str, str]] = []
        self.links: list[dict[str, str]] = []
        self.anchors: list[str] = []
        self.text: list[str] = []
        self.tables: dict[str, Table] = {}
        self.section_stack: list[str] = []
        self.images_by_section: dict[str, int] = {}
        self._table: Table | None = None
        self._in_tbody = False
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.append(a["id"])
        if tag not in _VOID:
            self._open.append(tag)
        if tag == "section":
            self.section_stack.append(a.get("id", ""))
        elif tag == "img":
            self.images.append(a)
            if self.section_stack:
                key = self.section_stack[-1]
                self.images_by_section[key] = self.images_by_section.get(key, 0) + 1
        elif tag == "script":
            self.scripts.append(a)
        elif tag == "link":
            self.links.append(a)
        elif tag == "a" and "href" in a:
            self.anchors.append(a["href"])
        elif tag == "table":
            self._table = Table(a.get("id", f"table-{len(self.tables)}"))
            self.tables[self._table.id] = self._table
        elif tag == "tbody":
            self._in_tbody = True
        elif tag == "tr" and self._in_tbody and self._table is not None:
            self._row = []
            self._table.row_attrs.append(a)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if self._open and self._open[-1] == tag:
            self._open.pop()
        if tag == "section" and self.section_stack:
            self.section_stack.pop()
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            self._table.rows.append(self._row)
            self._row = None
        elif tag == "tbody":
            self._in_tbody = False
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(html: str) -> ReportParser:
    parser = ReportParser()
    parser.feed(html)
    parser.close()
    return parser

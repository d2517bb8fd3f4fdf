"""One self-contained report.html: every table, every figure embedded (SVG as base64)."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2rem auto; max-width: 1280px;
       padding: 0 1.5rem; color: #222; line-height: 1.45; }
h1 { margin-bottom: .2rem; } h2 { margin-top: 2.6rem; border-bottom: 2px solid #ddd; padding-bottom: .3rem; }
h3 { margin-top: 1.6rem; color: #333; }
.meta { color: #555; font-size: .92rem; }
table { border-collapse: collapse; margin: .6rem 0 .4rem; font-size: .9rem; }
th, td { padding: .28rem .7rem; border-bottom: 1px solid #e3e3e3; text-align: right; white-space: nowrap; }
th { background: #f4f6f8; border-bottom: 2px solid #ccc; }
th:first-child, td:first-child { text-align: left; font-family: ui-monospace, Menlo, Consolas, monospace; }
tr:hover td { background: #fafbfc; }
td.never { color: #b00; }
td.yes { color: #1a7f37; font-weight: 600; }
.note { color: #666; font-size: .85rem; max-width: 60rem; }
figure { margin: 1rem 0 1.6rem; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: .88rem; margin-top: .3rem; }
nav ul { columns: 2; font-size: .92rem; }
"""


@dataclass
class Section:
    title: str
    anchor: str
    tables: list[tuple[str, list[str], list[list[str]], str]] = field(default_factory=list)  # title, header, rows, note
    figures: list[tuple[str, Path]] = field(default_factory=list)  # caption, svg path


def table_html(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for value in row:
            cls = ' class="never"' if value == "never" else (' class="yes"' if value == "yes" else "")
            cells.append(f"<td{cls}>{html.escape(str(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def image_html(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/svg+xml;base64,{data}">'


def render(title: str, meta: list[str], sections: list[Section]) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    parts += [f'<p class="meta">{html.escape(line)}</p>' for line in meta]
    parts.append(
        "<nav><ul>"
        + "".join(f'<li><a href="#{s.anchor}">{html.escape(s.title)}</a></li>' for s in sections)
        + "</ul></nav>"
    )
    for section in sections:
        parts.append(f'<section id="{section.anchor}"><h2>{html.escape(section.title)}</h2>')
        for table_title, header, rows, note in section.tables:
            parts.append(f"<h3>{html.escape(table_title)}</h3>")
            parts.append(table_html(header, rows))
            if note:
                parts.append(f'<p class="note">{html.escape(note)}</p>')
        for caption, path in section.figures:
            parts.append(f"<figure>{image_html(path, caption)}<figcaption>{html.escape(caption)}</figcaption></figure>")
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"

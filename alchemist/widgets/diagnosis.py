"""The diagnosis report (:mod:`alchemist.diagnosis.report`) as HTML, for the monitor.

The monitor's Diagnose button shows :func:`diagnosis_html` of ``job.diagnose()``: the
headline, one line per rank (its liveness, last step and when, innermost user frame with
its line, the collective it waits in, and the text of that line), the ranks' grouped
stacks (collapsed), and the notes. The per-rank ``line`` and group ``summary`` are the
report's own, so the notebook, the CLI and the panel say the same words.
"""

from __future__ import annotations

import html
from typing import Any

from alchemist.diagnosis.progress import format_ranks

_CLASS_COLOURS = {
    "running": "#2ca02c",
    "not_running": "#7f7f7f",
    "checkpoint_barrier": "#1f77b4",
}


def _frame(frame: dict[str, Any]) -> str:
    return f"{frame.get('function', '?')} ({frame.get('file', '?')}:{frame.get('line', '?')})"


def diagnosis_html(report: dict[str, Any]) -> str:
    """The report as an HTML block: headline, a line per rank, grouped stacks, notes."""
    kind = str(report.get("classification", ""))
    colour = _CLASS_COLOURS.get(kind, "#d62728")
    out = [
        '<div class="alchemist-diagnosis">',
        f'<div class="alchemist-diagnosis-headline" data-classification="{html.escape(kind)}"'
        f' style="border-left:4px solid {colour};padding-left:6px">'
        f"<b>{html.escape(str(report.get('headline', '')))}</b>"
        f' <span style="color:#888">({html.escape(kind)})</span></div>',
    ]
    rows = []
    for entry in report.get("ranks") or []:
        code = entry.get("code")
        code_html = f" <code>{html.escape(code)}</code>" if code else ""
        rows.append(
            f'<li class="alchemist-diagnosis-rank" data-rank="{int(entry.get("rank", -1))}">'
            f"<code>{html.escape(str(entry.get('line', '')))}</code>{code_html}</li>"
        )
    if rows:
        out.append('<ul style="margin:2px 0;padding-left:1.2em">' + "".join(rows) + "</ul>")
    for group in report.get("groups") or []:
        frames = "\n".join(_frame(f) for f in group.get("frames") or [])
        out.append(
            '<details class="alchemist-diagnosis-group">'
            f"<summary>{html.escape(format_ranks(list(group.get('ranks') or [-1])))}:"
            f" {html.escape(str(group.get('summary', '')))}</summary>"
            f"<pre style='font-size:11px;margin:0'>{html.escape(frames)}</pre></details>"
        )
    for note in report.get("notes") or []:
        out.append(f'<div style="color:#888">note: {html.escape(str(note))}</div>')
    if report.get("partial"):
        out.append('<div style="color:#888">partial: some running ranks gave no stacks</div>')
    out.append("</div>")
    return "".join(out)


def error_html(message: str) -> str:
    """A diagnosis that could not be made, in one line."""
    return (
        '<div class="alchemist-diagnosis" style="color:#d62728">'
        f"diagnosis failed: {html.escape(message)}</div>"
    )

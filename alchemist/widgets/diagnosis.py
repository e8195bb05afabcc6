"""The diagnosis report (:mod:`alchemist.diagnosis.report`) as HTML, for the monitor.

The monitor's Diagnose button shows :func:`diagnosis_html` of ``job.diagnose()``: the
headline, one line per rank (its liveness, last step and when, innermost user frame with
its line, the collective it waits in, and the text of that line), the ranks' grouped
stacks (collapsed), and the notes. The per-rank ``line`` and group ``summary`` are the
report's own, so the notebook, the CLI and the panel say the same words.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from alchemist.diagnosis.progress import format_ranks

_CLASS_COLOURS = {
    "running": "#2ca02c",
    "not_running": "#7f7f7f",
    "checkpoint_barrier": "#1f77b4",
    "collecting": "#7f7f7f",
}


def _frame(frame: dict[str, Any]) -> str:
    return f"{frame.get('function', '?')} ({frame.get('file', '?')}:{frame.get('line', '?')})"


def diagnosis_html(report: dict[str, Any]) -> str:
    """The report as an HTML block: headline, a line per rank, grouped stacks, notes,
    and how to get the debug bundle. A partial report (``collecting``: the ranks are
    still answering) shows its headline (``rank 0 answered; waiting for rank 1 (up to
    3 s)``) and the lines of the ranks that answered."""
    kind = str(report.get("classification", ""))
    colour = _CLASS_COLOURS.get(kind, "#d62728")
    collecting = bool(report.get("collecting"))
    headline = html.escape(str(report.get("headline", "")))
    out = [
        '<div class="alchemist-diagnosis">',
        f'<div class="alchemist-diagnosis-headline" data-classification="{html.escape(kind)}"'
        f' style="border-left:4px solid {colour};padding-left:6px">'
        + (
            f'<i class="alchemist-diagnosis-collecting">{headline}…</i></div>'
            if collecting
            else f'<b>{headline}</b> <span style="color:#888">({html.escape(kind)})</span></div>'
        ),
    ]
    rows = []
    for entry in report.get("ranks") or []:
        if collecting and not entry.get("answered"):
            continue
        code = entry.get("code")
        code_html = f" <code>{html.escape(code)}</code>" if code else ""
        rows.append(
            f'<li class="alchemist-diagnosis-rank" data-rank="{int(entry.get("rank", -1))}">'
            f"<code>{html.escape(str(entry.get('line', '')))}</code>{code_html}</li>"
        )
    if rows:
        out.append('<ul style="margin:2px 0;padding-left:1.2em">' + "".join(rows) + "</ul>")
    for group in [] if collecting else report.get("groups") or []:
        frames = "\n".join(_frame(f) for f in group.get("frames") or [])
        out.append(
            '<details class="alchemist-diagnosis-group">'
            f"<summary>{html.escape(format_ranks(list(group.get('ranks') or [-1])))}:"
            f" {html.escape(str(group.get('summary', '')))}</summary>"
            f"<pre style='font-size:11px;margin:0'>{html.escape(frames)}</pre></details>"
        )
    for note in report.get("notes") or []:
        out.append(f'<div style="color:#888">note: {html.escape(str(note))}</div>')
    if report.get("partial") and not collecting:
        out.append('<div style="color:#888">partial: some running ranks gave no stacks</div>')
    job_id = report.get("job_id")
    if job_id and not collecting:
        ident = html.escape(str(job_id))
        out.append(
            '<div class="alchemist-diagnosis-bundle-hint" style="color:#888">debug bundle:'
            f" <b>Save debug bundle</b>, <code>alchemist diagnose {ident} --bundle PATH</code>"
            f" or <code>%alchemist_diagnose {ident} --bundle PATH</code></div>"
        )
    out.append("</div>")
    return "".join(out)


#: The largest bundle offered as a link that carries the file itself (a ``data:`` URL).
LINK_MAX_BYTES = 8 << 20


def bundle_link_html(path: Path, data: bytes) -> str:
    """A saved debug bundle: a download link that carries the file (a ``data:`` URL,
    which works in any front end without knowing the Jupyter server's address), and
    where it was written. A bundle over :data:`LINK_MAX_BYTES` gets no link."""
    where = f"saved to <code>{html.escape(str(path))}</code>"
    if len(data) > LINK_MAX_BYTES:
        return f'<span class="alchemist-bundle">{where} ({len(data) >> 20} MiB: too big for a link)</span>'
    href = "data:application/gzip;base64," + base64.b64encode(data).decode("ascii")
    return (
        f'<span class="alchemist-bundle"><a href="{href}" download="{html.escape(path.name)}">'
        f"⬇ {html.escape(path.name)}</a> ({len(data) / 1024:.0f} KiB; {where})</span>"
    )


def error_html(message: str) -> str:
    """A diagnosis that could not be made, in one line."""
    return (
        '<div class="alchemist-diagnosis" style="color:#d62728">'
        f"diagnosis failed: {html.escape(message)}</div>"
    )

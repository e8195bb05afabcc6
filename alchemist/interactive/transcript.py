"""The session's transcript (every ``%%alchemist_px`` cell) and its promotion to a script.

Each cell appends one JSON line to ``session/transcript.jsonl``: its number, the
notebook's cell id when the frontend sends one, the source, the targets (None: every
rank), its status (``ok``, ``failed``, ``interrupted``) and per-rank outcome, and the
time. :func:`promotion` turns the ``ok`` cells into one script, in execution order: a
cell run again (same cell id) counts once, in its last version at its last place; a
cell run on some ranks only is wrapped in ``if alchemist.context().rank in {...}:``.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from alchemist.job.jobdir import make_private_dir


@dataclass
class CellRecord:
    """One ``%%alchemist_px`` cell as it ran."""

    n: int
    source: str
    targets: list[int] | None
    status: str  # ok | failed | interrupted
    ranks: dict[str, str] = field(default_factory=dict)  # rank → "ok" | the error's line
    cell_id: str | None = None
    time: float = field(default_factory=time.time)


def append(path: Path, record: CellRecord) -> None:
    make_private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with open(fd, "a", encoding="utf-8") as f:
        f.write(json.dumps(asdict(record)) + "\n")


def read(path: Path) -> list[CellRecord]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(CellRecord(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return out


@dataclass
class Promotion:
    """What :func:`promotion` made of a transcript."""

    script: str
    kept: list[CellRecord]
    left_out: list[tuple[CellRecord, str]]  # (cell, why)

    def warnings(self) -> list[str]:
        return [f"cell #{c.n} left out: {why}" for c, why in self.left_out]


def promotion(
    records: list[CellRecord], world_size: int, cells: list[int] | None = None
) -> Promotion:
    """The script of the successful cells (``cells``: only these numbers).

    Raises:
        ValueError: ``cells`` names a number the transcript does not have.
    """
    if cells is not None:
        known = {r.n for r in records}
        unknown = sorted(set(cells) - known)
        if unknown:
            raise ValueError(
                f"no cell #{', #'.join(map(str, unknown))} in the session's transcript"
                f" (it has #{min(known) if known else 0} to #{max(known) if known else 0})"
            )
    left_out: list[tuple[CellRecord, str]] = []
    chosen: list[CellRecord] = []
    for rec in records:
        if cells is not None and rec.n not in cells:
            continue
        if rec.status != "ok":
            left_out.append((rec, rec.status))
            continue
        chosen.append(rec)
    # A cell run again counts once: its last version, at its last place.
    last: dict[str, int] = {}
    for i, rec in enumerate(chosen):
        if rec.cell_id:
            last[rec.cell_id] = i
    kept = []
    for i, rec in enumerate(chosen):
        if rec.cell_id and last[rec.cell_id] != i:
            left_out.append((rec, f"run again later as cell #{chosen[last[rec.cell_id]].n}"))
            continue
        kept.append(rec)
    left_out.sort(key=lambda item: item[0].n)
    parts = ["import alchemist\n"]
    for rec in kept:
        source = rec.source.rstrip() + "\n"
        everyone = rec.targets is None or sorted(rec.targets) == list(range(world_size))
        if not everyone:
            ranks = ", ".join(str(r) for r in sorted(rec.targets or []))
            body = textwrap.indent(source, "    ") if source.strip() else "    pass\n"
            source = f"if alchemist.context().rank in {{{ranks}}}:\n{body}"
        parts.append(f"# --- cell #{rec.n} ---\n{source}")
    return Promotion(script="\n".join(parts), kept=kept, left_out=left_out)


def as_dicts(records: list[CellRecord]) -> list[dict[str, Any]]:
    return [asdict(r) for r in records]

"""Copy the example notebooks into a user's home, once.

Run by the spawner before each start. In ``accounts`` isolation it runs as the user
(``python -m alchemist.hub.embedded.seed SRC HOME`` started with the user's uid), so it can
only write what the user could write: a root process writing into a directory the user
controls could be sent elsewhere by a symlink.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

#: Marker written after the first copy; while it exists the examples are not copied
#: again, so a user who deletes or edits them keeps their choice.
MARKER = Path(".alchemist") / "hub-examples-copied"

#: Where the examples land, relative to the home.
EXAMPLES_DIR = "notebooks"


def seed_home(home: Path, source: Path) -> bool:
    """Copy ``source`` to ``home/notebooks`` unless done before.

    Files already in ``home/notebooks`` are never overwritten.

    Returns:
        True when the examples were copied now.
    """
    marker = home / MARKER
    if marker.exists():
        return False
    target = home / EXAMPLES_DIR
    if source.is_dir():
        for src in sorted(source.rglob("*")):
            rel = src.relative_to(source)
            if _ignored(rel) or not src.is_file():
                continue
            dest = target / rel
            if dest.exists() or dest.is_symlink():
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
    marker.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    marker.write_text(f"{source}\n")
    return True


def _ignored(rel: Path) -> bool:
    return any(part in (".ipynb_checkpoints", "__pycache__") for part in rel.parts) or (
        rel.suffix == ".pyc"
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m alchemist.hub.embedded.seed SOURCE HOME", file=sys.stderr)
        return 2
    seed_home(Path(args[1]), Path(args[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

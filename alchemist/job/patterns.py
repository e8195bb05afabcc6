"""File patterns: ``--include``, ``--exclude`` and ``.alchemistignore`` (``.gitignore``
syntax, read with ``pathspec``, the library git-style tools use)."""

from __future__ import annotations

from collections.abc import Sequence

import pathspec

from alchemist.errors import SpecError


def compile_patterns(patterns: Sequence[str], what: str) -> pathspec.PathSpec | None:
    """A matcher for ``.gitignore``-style ``patterns``; None when there are none.

    Raises:
        SpecError: a pattern that is not valid (naming ``what``, e.g. ``--exclude``).
    """
    if not patterns:
        return None
    for p in patterns:
        if not isinstance(p, str) or not p.strip() or "\0" in p:
            raise SpecError(f"{what} expects file patterns such as 'data/*.csv', got {p!r}")
    try:
        return pathspec.PathSpec.from_lines("gitwildmatch", patterns)
    except (ValueError, TypeError) as e:  # pathspec's GitWildMatchPatternError is a ValueError
        raise SpecError(f"{what}: {e}") from None

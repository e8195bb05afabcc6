"""A fuzz of the ``%%alchemist_distributed`` line: whatever a user types, the magic
answers with one ``UsageError`` line or a dry run, never a traceback.

Lines are built from the magic's real flags (from the job-options table) with values
of every shape (numbers out of range, unclosed quotes, NUL bytes, runtime variables
in ``--env``, keywords as ``-o`` names), plus raw junk. Every line ends in
``--dry-run``, so nothing is ever submitted.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError

from alchemist.job.options import JOB_OPTIONS

FLAGS = [f for o in JOB_OPTIONS if "magic" in o.entry_points for f in o.flags] + [
    "-o",
    "--outputs",
    "--detach",
    "--no-widget",
    "--max-output-lines",
    "-h",
    "--bogus",
]
VALUES = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6).map(str),
    st.sampled_from(
        [
            "'unclosed",
            '"unclosed',
            "RANK=9",
            "MASTER_PORT=1",
            "ALCHEMIST_JOB_DIR=/x",
            "LD_PRELOAD=x.so",
            "K=V",
            "=",
            "None",
            "class",
            "a,b",
            "nan",
            "inf",
            "1e309",
            "kubernetes",
            "nope",
            "bucket_cap_mb=-1",
            "block_momentum=2",
            "x\x00y",
            "",
            "100000",
        ]
    ),
    # A magic line is one line: anything but line breaks.
    st.text(
        alphabet=st.characters(
            blacklist_categories=("Zl", "Zp"),
            blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85",
        ),
        max_size=12,
    ),
)
LINE = st.lists(st.one_of(st.sampled_from(FLAGS), VALUES), max_size=8).map(" ".join)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(line=LINE)
def test_no_magic_line_gives_a_traceback(ip: Any, line: str) -> None:
    try:
        ip.run_cell_magic("alchemist_distributed", line + " --dry-run", "x = 1\n")
    except UsageError as e:
        message = str(e)
        assert message and "Traceback" not in message
        assert len(message.splitlines()) <= 2, message

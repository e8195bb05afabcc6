"""The metric event's shape: what ranks write and every reader expects.

One JSON object a line in ``metrics/rank-<r>.jsonl``::

    {"job_id": "j-1a2b", "rank": 0, "attempt": 0, "step": 12, "time": 1764700000.25,
     "values": {"loss": 0.53, "lr": 0.1}}

System metrics (``metrics/system-rank-<r>.jsonl``) have the same shape plus
``"kind": "system"`` and ``"host"``. Written by :mod:`alchemist.metrics.reporter`, read by
:mod:`alchemist.metrics.reader`, summarized by :mod:`alchemist.metrics.summary`.
"""

from __future__ import annotations

#: Values the monitor reads as job metadata rather than curves.
META_KEYS = frozenset({"total_steps", "batch_size"})

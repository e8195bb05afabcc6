"""Notebook widgets: the live job monitor (:class:`JobMonitor`).

Showing the widget needs ipywidgets and bqplot; without them the monitor still shows
as HTML or text, and the magics fall back to plain text output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alchemist._lazy import lazy_exports

if TYPE_CHECKING:
    from alchemist.widgets.monitor import JobMonitor, MonitorData, MonitoredJob

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "JobMonitor": "alchemist.widgets.monitor",
        "MonitorData": "alchemist.widgets.monitor",
        "MonitoredJob": "alchemist.widgets.monitor",
    },
)


__all__ = ["JobMonitor", "MonitorData", "MonitoredJob"]

"""Notebook widgets: the live job monitor (:class:`JobMonitor`).

Showing the widget needs ipywidgets and bqplot; without them the monitor still shows
as HTML or text, and the magics fall back to plain text output.
"""

from __future__ import annotations

from alchemist.widgets.monitor import JobMonitor, MonitorData, MonitoredJob

__all__ = ["JobMonitor", "MonitorData", "MonitoredJob"]

"""Notebook widgets: the live job monitor (:class:`JobMonitor`).

Importing this package needs ipywidgets and plotly (``anywidget`` for plotly ≥ 6 to
render); the magics fall back to plain text output when the import fails.
"""

from __future__ import annotations

from alchemist.widgets.monitor import JobMonitor, MonitorData, MonitoredJob

__all__ = ["JobMonitor", "MonitorData", "MonitoredJob"]

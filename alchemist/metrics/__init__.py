"""Metric events and the tailing readers of job files (metrics and logs)."""

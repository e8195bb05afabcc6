"""Alchemist: easy, fast, scalable distributed training from a Jupyter notebook."""

from __future__ import annotations

__version__ = "0.1.0"

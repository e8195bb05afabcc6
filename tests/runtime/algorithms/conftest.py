"""Fixtures of the algorithm tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from algo_harness import save_digits


@pytest.fixture(scope="session")
def digits_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scikit-learn's digits, split and saved once for every rank of every test."""
    return save_digits(tmp_path_factory.mktemp("digits") / "digits.pt")

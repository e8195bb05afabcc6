"""Fixtures of the chart tests: a real Helm binary.

Without one (``bash scripts/setup.d/30-helm.sh`` installs it) the chart tests skip.
"""

from __future__ import annotations

import pytest

from tests.support.chart import find_helm


@pytest.fixture(scope="session")
def helm() -> str:
    path = find_helm()
    if path is None:
        pytest.skip("helm is not installed: run `bash scripts/setup.d/30-helm.sh`")
    return path

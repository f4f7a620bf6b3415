"""Shared fixtures and test settings.

Hypothesis: tests never depend on wall-clock time, so its deadline and its "too slow" health checks
(which trip on a loaded machine) are off; the example counts stay as each test sets them.
"""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("shardwise", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("shardwise")

DATA = Path(__file__).parent / "data"


@pytest.fixture
def data_dir() -> Path:
    return DATA

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture
def shared_data():
    """../shared/data beside the checkout (CI always has it); skip elsewhere."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs the shared reference data at {SHARED_DATA} (CI has it beside the checkout)")
    return SHARED_DATA


@pytest.fixture
def cpu_env():
    """Environment for `prism` subprocesses: one intra-op thread keeps tests quick and quiet."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

import os

import pytest

from predictor.core.profiles import DATA_DIR, REPO_ROOT

ROOT = REPO_ROOT  # the checkout: tests read its measurements/, samples/ and models/


@pytest.fixture
def reference_data():
    """The reference data the project ships (data/): every clone has it, so nothing skips."""
    assert DATA_DIR.is_dir(), f"{DATA_DIR} is missing from the checkout"
    return DATA_DIR


@pytest.fixture
def cpu_env():
    """Environment for `prism` subprocesses: one intra-op thread keeps tests quick and quiet."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

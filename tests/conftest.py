import os

import pytest
from hypothesis import settings

from predictor.core.profiles import DATA_DIR, REPO_ROOT

ROOT = REPO_ROOT  # the checkout: tests read its measurements/, samples/ and models/

# The property tests draw the same examples on every run and every machine: a CI run fails
# only where the code changed, never on a newly drawn example (widen them by raising
# max_examples, not by chance).
settings.register_profile("prism", derandomize=True)
settings.load_profile("prism")


@pytest.fixture
def reference_data():
    """The reference data the project ships (data/): every clone has it, so nothing skips."""
    assert DATA_DIR.is_dir(), f"{DATA_DIR} is missing from the checkout"
    return DATA_DIR


@pytest.fixture
def cpu_env():
    """Environment for `prism` subprocesses: one intra-op thread keeps tests quick and quiet."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

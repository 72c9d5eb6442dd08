"""notebooks/ run top to bottom: each in a fresh python3 kernel (nbclient), from a temporary
copy so the committed file and its outputs are never rewritten, with notebooks/ as the
working directory as Jupyter would have it. Any cell error fails the test; so does a
notebook that runs past its time limit or draws no figure."""
import shutil
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
# seconds per notebook; all three run in about a minute on 2 idle cores (bench_notebooks.py)
LIMIT_S = {"validation.ipynb": 240, "hardware_comparison_70b.ipynb": 120, "variability_at_scale.ipynb": 120}


def test_every_notebook_is_tested():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(LIMIT_S)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LIMIT_S))
def test_notebook_runs_top_to_bottom(name, tmp_path):
    committed = NOTEBOOKS / name
    before = committed.read_bytes()
    copy = tmp_path / name
    shutil.copyfile(committed, copy)
    nb = nbformat.read(copy, as_version=4)
    deadline = time.perf_counter() + LIMIT_S[name]
    client = NotebookClient(nb, kernel_name="python3", startup_timeout=120, record_timing=False,
                            timeout_func=lambda cell: max(1, int(deadline - time.perf_counter())),
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()  # raises CellExecutionError on the first failing cell, a timeout past the limit
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{name} drew no figure"
    assert committed.read_bytes() == before

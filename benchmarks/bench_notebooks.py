"""Execute every notebook of notebooks/ top to bottom and print each one's wall time.

    python benchmarks/bench_notebooks.py [--write] [NOTEBOOK ...]

Each notebook runs in a fresh ``python3`` kernel (nbclient; ``jupyter`` itself is not
needed) with notebooks/ as its working directory, as Jupyter would run it. The files are
left as they are unless ``--write`` is given, which saves them with the new outputs (how
the committed outputs are refreshed). Budget: all notebooks together in 5 minutes on CI.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
BUDGET_S = 300.0


def execute(path: Path, timeout_s: float = BUDGET_S):
    """Run the notebook at ``path`` in a fresh kernel (cwd: its folder); return it with its
    outputs and the wall time. Raises ``nbclient.exceptions.CellExecutionError`` on the first
    cell that fails, and a timeout error when a cell runs past the notebook's remaining
    ``timeout_s``."""
    nb = nbformat.read(path, as_version=4)
    deadline = time.perf_counter() + timeout_s
    client = NotebookClient(nb, kernel_name="python3", startup_timeout=120, record_timing=False,
                            timeout_func=lambda cell: max(1, int(deadline - time.perf_counter())),
                            resources={"metadata": {"path": str(path.parent)}})
    t0 = time.perf_counter()
    client.execute()
    return nb, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebooks", nargs="*", type=Path, help="default: every notebooks/*.ipynb")
    ap.add_argument("--write", action="store_true", help="save each executed notebook with its outputs")
    args = ap.parse_args()
    paths = args.notebooks or sorted(NOTEBOOKS.glob("*.ipynb"))
    total = 0.0
    for path in paths:
        nb, seconds = execute(path.resolve())
        total += seconds
        note = ""
        if args.write:
            tmp = path.with_name(f".{path.name}.tmp")
            nbformat.write(nb, tmp)
            os.replace(tmp, path)
            note = f"  written, {path.stat().st_size / 1024:.0f} KiB"
        print(f"{path.name:36s} {seconds:6.1f} s{note}", flush=True)
    print(f"{'total':36s} {total:6.1f} s   budget {BUDGET_S:.0f} s: {'ok' if total <= BUDGET_S else 'OVER'}")
    return 0 if total <= BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())

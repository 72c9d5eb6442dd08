"""Speed of the two things users wait for: one ``prism predict``, and predict-batch over a
table of distinct jobs.

    python benchmarks/bench_speed.py [-n 7] [--skip-batch] [--root DIR]

(1) ``prism predict`` from process start to exit, each run a fresh process
(``python -m predictor.app.cli`` with the checkout first on the path, timed by
benchmarks/bench_startup.py's ``run_once``): the README's job
(gpt3-13b on 64 A100) and gpt3-175b on 3,072 A100 (tp=4, pp=64, micro-batch 4, global
batch 3,072, full recompute). Prints the min and median wall time and the median CPU time
(user + system) of ``-n`` runs after one untimed run; issue 51 asks for at most 0.5 s each.

(2) ``prism predict-batch`` over 1,480 jobs: data/e2e/e2e_training_visible.csv's 185 rows
with their global batch scaled 1x to 8x (rows without one stay as they are, so some jobs
repeat), written to a temporary folder and predicted in one fresh process. Prints the
wall time, CPU time and ms per row; issue 51 asks for at most 20 s.

The machine is shared: the load average before and after each part says how busy it
was; compare trees on one machine with ``--root`` (another checkout's predictor first on
the path). A script that prints, not a timed assertion.
"""
from __future__ import annotations

import argparse
import csv
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_startup import run_once  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
README_JOB = ["predict", "model=gpt3-13b", "hardware=a100-sxm4-80gb", "gpus=64", "parallel.tp=8"]
GPT3_175B = ["predict", "model=gpt3-175b", "hardware=a100-sxm4-80gb", "gpus=3072", "parallel.tp=4",
             "parallel.pp=64", "parallel.micro_batch_size=4", "parallel.global_batch_size=3072",
             "parallel.recompute=full"]
COMMANDS = {"README job: gpt3-13b on 64 A100": README_JOB, "gpt3-175b on 3,072 A100": GPT3_175B}
TABLE = ROOT / "data" / "e2e" / "e2e_training_visible.csv"
SCALES = range(1, 9)


def scaled_table(path: Path, source: Path = TABLE) -> int:
    """``source``'s rows with the global batch (``gbs``) scaled by each of :data:`SCALES`,
    written to ``path``; the row count."""
    with open(source, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    out = []
    for k in SCALES:
        for row in rows:
            row = dict(row)
            if row["gbs"]:
                row["gbs"] = f"{float(row['gbs']) * k:g}"
            row["set_id"] = f"{row['set_id']}_x{k}"
            out.append(row)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(out)
    return len(out)


def predict_figures(root: Path, start: list[str], env: dict, n: int) -> None:
    print(f"{'prism predict':<40} {'min s':>6} {'median s':>8} {'CPU s':>6}   (load {os.getloadavg()[0]:.2f})")
    for name, command in COMMANDS.items():
        run_once([*start, *command], root, env)  # warm the file cache
        runs = [run_once([*start, *command], root, env) for _ in range(n)]
        walls = [w for w, _ in runs]
        print(f"{name:<40} {min(walls):6.3f} {statistics.median(walls):8.3f} "
              f"{statistics.median(c for _, c in runs):6.3f}")


def batch_figures(root: Path, start: list[str], env: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        table, out = Path(tmp) / "jobs.csv", Path(tmp) / "jobs.predicted.csv"
        rows = scaled_table(table)
        load = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([*start, "predict-batch", str(table), f"out={out}"], cwd=root, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        with open(out, newline="", encoding="utf-8") as f:
            statuses = [r["pred_status"] for r in csv.DictReader(f)]
    print(f"prism predict-batch, {rows} rows ({TABLE.name} x{SCALES.start}..x{SCALES.stop - 1} global batch): "
          f"{wall:.1f} s wall, {cpu:.1f} s CPU, {1000 * wall / rows:.1f} ms a row "
          f"({statuses.count('ok')} predicted; load {load:.2f} before, {os.getloadavg()[0]:.2f} after)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=7, help="runs per predict command (default 7)")
    parser.add_argument("--skip-batch", action="store_true", help="time the predict commands alone")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to time (default: this one)")
    args = parser.parse_args()
    root = args.root.resolve()
    # this checkout's predictor first on the path, whichever one ``prism`` was installed from
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    start = [sys.executable, "-m", "predictor.app.cli"]
    print(f"{root}: {os.cpu_count()} CPUs")
    predict_figures(root, start, env, args.n)
    if not args.skip_batch:
        batch_figures(root, start, env)


if __name__ == "__main__":
    main()

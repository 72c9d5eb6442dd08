"""Start-up: how long the README's main command takes, as a user runs it.

    python benchmarks/bench_startup.py [-n 10] [--root DIR]

Runs each command ``-n`` times, each in a fresh process (``prism`` beside this Python,
else ``python -m predictor.app.cli``), and prints the min and median wall time and the
median CPU time (user + system; less disturbed than wall time by other work on the
machine) for: the main prediction (the issue asks for at most 0.6 s on a warm machine),
the same with ``--json``, and ``prism --help``. The load average before and after says
how busy the machine was. One untimed run of each first warms the file cache.
``--root`` times another checkout (its ``predictor`` first on the path), to compare two
trees on one machine.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN = ["predict", "model=gpt3-13b", "hardware=a100-sxm4-80gb", "gpus=64", "parallel.tp=8"]
COMMANDS = {"prism " + " ".join(MAIN): MAIN, "prism " + " ".join(MAIN) + " --json": [*MAIN, "--json"],
            "prism --help": ["--help"]}


def launcher() -> list[str]:
    """How a user starts prism: the installed script beside this Python, or the module."""
    script = Path(sys.executable).with_name("prism")
    return [str(script)] if script.exists() else [sys.executable, "-m", "predictor.app.cli"]


def run_once(command: list[str], root: Path, env: dict) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one run of ``command``, in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(command, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="runs per command (default 10)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to time (default: this one)")
    args = parser.parse_args()
    root = args.root.resolve()
    env = dict(os.environ)
    if root != ROOT:  # that checkout's predictor, not the installed one
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    start = launcher() if root == ROOT else [sys.executable, "-m", "predictor.app.cli"]
    load = os.getloadavg()[0]
    print(f"{root}: {args.n} fresh processes per command, {os.cpu_count()} CPUs, load average {load:.2f}")
    print(f"{'command':<86} {'min s':>6} {'median s':>8} {'CPU s':>6}")
    for name, command in COMMANDS.items():
        run_once([*start, *command], root, env)  # warm the file cache
        runs = [run_once([*start, *command], root, env) for _ in range(args.n)]
        walls = [w for w, _ in runs]
        print(f"{name:<86} {min(walls):6.3f} {statistics.median(walls):8.3f} "
              f"{statistics.median(c for _, c in runs):6.3f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

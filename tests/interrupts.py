"""Running a ``prism`` command and stopping it at a seeded random moment: the helpers of the
interrupted-writer tests (tests/test_interrupted_writers.py, tests/sampling/test_interrupted_sampling.py)."""
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRISM = [sys.executable, "-m", "predictor.app.cli"]
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _stopped(argv: list[str], after_s: float, sig: int) -> subprocess.CompletedProcess:
    """``argv`` run and sent ``sig`` after ``after_s`` seconds (if still running)."""
    run = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        run.wait(timeout=after_s)
    except subprocess.TimeoutExpired:
        run.send_signal(sig)
    out, err = run.communicate(timeout=300)
    return subprocess.CompletedProcess(argv, run.returncode, out, err)


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    """``argv`` run to its end."""
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, env=ENV)


def _moments(seed: int, longest_s: float, n: int = 3) -> list[tuple[float, int]]:
    """``n`` (seconds, signal) pairs drawn with ``seed``: when to stop a command, and how."""
    rng = random.Random(seed)
    return [(rng.uniform(0.2, longest_s), rng.choice(SIGNALS)) for _ in range(n)]

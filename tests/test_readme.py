"""Every command and snippet of README.md runs, so that none can rot.

The ```bash blocks are split into commands (a trailing backslash continues a line, ``&&``
chains two commands, ``#`` starts a comment) and each ```python block is one snippet;
plain ``` blocks show printed output and are not run. A command in backticks in the last
cell of a table row (the accuracy table) is a command too, and where it runs, each
percentage of its row's other cells (``8.4%``) must appear in what it prints. All of them run in README order,
as bash and python would run them, in one temporary working copy (``data/``, ``models/``,
``samples/``, ``measurements/`` and ``benchmarks/`` copied, so what a command writes
stays there and a later command can read it), with ``OMP_NUM_THREADS=1``:

- a ``prism`` command and a python snippet run as written, within :data:`LIMIT_S`;
- a command of :data:`REDUCED` runs with settings that make it take seconds where the
  README's own takes minutes (added after its own settings: the last value of a key wins);
- a command of :data:`NOT_RUN` is not run here; its entry says why and names the test
  that runs what it runs.

Any other command (``pip``, ``python``, a new script) fails
:func:`test_every_command_is_accounted_for` until it is given one of those rules, and a
rule no README command uses fails it too. Benchmarks that are not run are still imported
(:func:`test_benchmarks_not_run_import`).
"""
from __future__ import annotations

import json
import os
import re
import runpy
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Every README command runs here: minutes. The fast suite (-m "not slow") leaves this file out.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: Copied into the working copy: what README commands read by relative paths.
COPIED = ("data", "models", "samples/local-cpu", "samples/h200", "samples/h100", "measurements", "benchmarks")
#: A README command that runs longer than this (on 2 busy cores) needs a REDUCED entry.
LIMIT_S = 120

_FAST_TRAINING = "regressor.params.n_estimators=5 regressor.params.median_rounds=5 regressor.params.spread_estimators=5"
#: Command prefix -> settings appended to every README command that starts with it
#: (except ``--help`` and ``--show-config``, which run nothing).
REDUCED = {
    # quick's 19 ops take 5 minutes (collectives under torchrun); two compute ops, 3 shapes: seconds,
    # without the co-run phase's neighbour (tests/sampling/test_co_run.py runs it)
    "prism sample": "sampling.ops=[gemm,layernorm] sampling.shapes_per_op=3 sampling.repeats=3 sampling.co_run_share=0",
    # 150 + 100 + 50 boosting rounds per model: 10-20 s for 27 models; 5 each: the same code, quicker
    "prism train": _FAST_TRAINING,
    # 30 timed steps (and 3 traced ones) per rank under torchrun
    "prism measure": "measure.steps=2 measure.warmup=1 measure.trace_steps=1",
    # 1,024 GPUs: 13,104 layouts, 6-10 s; 64 GPUs: the same search over fewer layouts
    "prism search": "gpus=64",
    # every visible published run predicted and scored: its table, the README's accuracy figures, takes half
    # the whole (about 30 s of 60 s alone; the whole ran past LIMIT_S beside the parallel suite's sampling tests)
    "python benchmarks/bench_generalization.py": "--table-only",
}
#: Exact README command -> why it is not run here, and what covers it.
NOT_RUN = {
    # Sampling a cluster: multi-rank jobs; the same code runs tiny in tests/sampling/test_cluster_sampling.py
    'torchrun --standalone --nproc_per_node=4 --no-python prism sample hardware=local-cpu sampling=cluster '
    'sampling.budget_s=300 "sampling.space.message_bytes=[1024,16777216]" output_dir=samples/cluster-cpu':
        "4 ranks for 5 minutes on 2 cores; tests/sampling/test_cluster_sampling.py::"
        "test_torchrun_job_of_two_emulated_nodes_stores_every_rank_once runs the same job with a tiny plan",
    "srun --nodes=4 --ntasks-per-node=8 --gpus-per-node=8 prism sample hardware=h100-sxm sampling=cluster "
    "output_dir=/shared/prism/samples":
        "needs SLURM and GPU nodes; tests/sampling/test_cluster_sampling.py::"
        "test_a_hung_rank_is_reported_by_rank_and_host_and_the_rest_finish sets srun's variables by hand",
    "pip install -e .": "installs PRISM: these tests run in that installation",
    'pip install -e ".[sampling,test]"': "installs PRISM with its test extra: these tests run in that installation",
    "python -m pytest -q -n auto --dist loadfile": "the test suite, this file included",
    'python -m pytest -q -n auto --dist loadfile -m "not slow"':
        "the fast test suite, which leaves this file out",
    "python benchmarks/validation_suite.py": "samples, trains, measures 16 layouts in 3 passes: about 19 minutes",
}


@dataclass(frozen=True)
class Snippet:
    """A README command (``bash``) or snippet (``python``) and the line it starts on."""

    line: int
    kind: str
    text: str
    #: For a command of a table row: the percentages of the row's other cells, which its output must contain.
    figures: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"README.md:{self.line}: {self.text if self.kind == 'bash' else 'python snippet'}"


def _commands(block: str) -> list[tuple[int, str]]:
    """(line offset, command) of each command of a bash block."""
    out, pending, start = [], "", 0
    for offset, line in enumerate(block.splitlines()):
        code = re.sub(r"(^|\s)#.*$", "", line).rstrip()
        if not pending:
            start = offset
        if code.endswith("\\"):
            pending += code[:-1]
            continue
        command, pending = " ".join((pending + code).split()), ""
        out += [(start, part.strip()) for part in command.split("&&") if part.strip()]
    return out


def readme_snippets(text: str) -> list[Snippet]:
    snippets = []
    for fence in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        first = text.count("\n", 0, fence.start()) + 2  # the README line of the block's first line
        kind, body = fence.group(1), fence.group(2)
        if kind == "python":
            snippets.append(Snippet(first, kind, body))
        elif kind == "bash":
            snippets += [Snippet(first + offset, kind, command) for offset, command in _commands(body)]
    for number, line in enumerate(text.splitlines(), 1):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        command = re.fullmatch(r"`((?:prism|python) [^`]+)`", cells[-1]) if len(cells) >= 2 else None
        if command:
            figures = tuple(re.findall(r"\d[\d,.]*%", " ".join(cells[:-1])))
            snippets.append(Snippet(number, "bash", command.group(1), figures))
    return sorted(snippets, key=lambda s: s.line)


SNIPPETS = readme_snippets(README.read_text())


def _reduction(command: str) -> str | None:
    """The REDUCED key ``command`` starts with, if any."""
    return next((key for key in REDUCED if command == key or command.startswith(key + " ")), None)


def _reduced(command: str) -> str:
    """``command`` with its REDUCED settings, after its own and before its ``--`` options
    (a command line's key=value settings come before them)."""
    words, key = command.split(), _reduction(command)
    if not key or "--help" in words or "--show-config" in words:
        return command
    at = next((i for i, word in enumerate(words) if word.startswith("--")), len(words))
    return " ".join([*words[:at], REDUCED[key], *words[at:]])


def _rule(snippet: Snippet) -> str:
    """How ``snippet`` is accounted for: "run", "reduced", "not run", or "none"."""
    if snippet.kind == "python":
        return "run"
    if snippet.text in NOT_RUN:
        return "not run"
    if _reduction(snippet.text):
        return "reduced"
    return "run" if snippet.text.split()[0] == "prism" else "none"


def test_every_command_is_accounted_for():
    assert SNIPPETS, "no ```bash or ```python block found in README.md"
    unaccounted = [str(s) for s in SNIPPETS if _rule(s) == "none"]
    assert not unaccounted, ("README commands with no rule in tests/test_readme.py (give each a REDUCED or "
                             f"NOT_RUN entry): {unaccounted}")
    commands = [s.text for s in SNIPPETS if s.kind == "bash"]
    stale = ([k for k in NOT_RUN if k not in commands]
             + [k for k in REDUCED if not any(_reduction(c) == k for c in commands)])
    assert not stale, f"rules in tests/test_readme.py that no README command uses any more: {stale}"


def test_named_tests_exist():
    """The tests NOT_RUN names as covering a command are there."""
    for reason in NOT_RUN.values():
        for path, name in re.findall(r"(tests/[\w/]+\.py)(?:::(\w+))?", reason):
            assert (ROOT / path).exists(), reason
            assert not name or f"def {name}(" in (ROOT / path).read_text(), reason


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("readme")
    for name in COPIED:
        shutil.copytree(ROOT / name, work / name)
    return work


@pytest.fixture(scope="module")
def env() -> dict:
    # prism and python of this interpreter first on the path; one thread per process
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}


#: What each table row's command printed, by command: rows citing one command (the accuracy table's
#: two sides) check their figures in one run of it (the runs of a module share one worker: --dist loadfile).
_TABLE_RUNS: dict[str, subprocess.CompletedProcess] = {}


@pytest.mark.slow
@pytest.mark.parametrize("snippet", [s for s in SNIPPETS if _rule(s) in ("run", "reduced")], ids=str)
def test_readme_command_runs(snippet, workdir, env):
    if snippet.kind == "python":
        argv, shell = [sys.executable, "-c", snippet.text], False
    else:
        argv, shell = _reduced(snippet.text), True
    try:
        done = _TABLE_RUNS.get(argv) if snippet.figures else None
        done = done or subprocess.run(argv, shell=shell, executable="/bin/bash" if shell else None, cwd=workdir,
                                      env=env, capture_output=True, text=True, timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{snippet} ran past {LIMIT_S} s: give it a REDUCED entry in tests/test_readme.py")
    if snippet.figures:
        _TABLE_RUNS[argv] = done
    assert done.returncode == 0, f"{snippet}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    if snippet.kind == "bash" and "--json" in snippet.text.split():
        json.loads(done.stdout)  # --json prints one JSON document
    missing = [figure for figure in snippet.figures if figure not in done.stdout]
    assert not missing, f"{snippet}: the README's figures {missing} are not in what it printed\n{done.stdout[-3000:]}"


@pytest.mark.parametrize("command", [c for c in NOT_RUN if c.startswith("python benchmarks/")])
def test_benchmarks_not_run_import(command):
    """A benchmark too long to run here still imports: its imports and definitions resolve."""
    runpy.run_path(str(ROOT / command.split()[1]), run_name="readme_check")

"""The one way PRISM runs a job under ``torchrun`` (docs/architecture.md, "The measuring side"): collective
sampling (:mod:`sampling.collectives`) and the reference workload (:mod:`sampling.reference`)
both go through it.

The front-end calls :func:`run_torchrun`: it writes the resolved job to ``job.json`` in a
folder of the caller's, starts ``python -m torch.distributed.run --standalone`` on it and
waits, showing the ranks' progress.

- A timeout stops the job and raises :class:`PrismError` naming the setting to change.
- Ctrl-C or SIGTERM is passed to torchrun, which passes it to every rank; the ranks flush
  what they measured and exit, torchrun exits, and ``KeyboardInterrupt`` is re-raised.
- A rank that fails gives one :class:`PrismError` line: the first rank to fail and its
  exception (the other ranks usually fail after it, on a closed connection, and
  torchrun's own summary names no cause), with the file keeping every rank's output.

Each rank starts in :func:`worker_main`, which reads the job, makes SIGTERM end the rank
as Ctrl-C does (exit code 130, no traceback) and records the rank's error for the
front-end; rank 0 reports progress with :func:`report_progress`. The job a rank reads
has the folder under ``"dir"``, where it may also write its results.

A cluster is not launched from here: its own launcher starts the ranks (``torchrun``
on every node, rendezvous by ``--rdzv-endpoint``, or SLURM's ``srun``), each running
``prism sample``, and :func:`cluster_env` tells such a rank where it stands from the
launcher's environment.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from predictor.core.errors import PrismError

#: torchrun gives its ranks 30 s to exit after a signal before it kills them; it gets a
#: little longer than that before it is killed itself.
STOP_GRACE_S = 45


def run_torchrun(module: str, job: dict, nproc: int, workdir: Path, *, what: str, timeout_s: float,
                 timeout_field: str, timeout_fix: str, failure_field: str, threads_per_rank: int = 1,
                 progress=None) -> None:
    """Run ``python -m module JOB.json`` on ``nproc`` local ranks under torchrun; see the
    module doc. ``what`` names the job in messages; a timeout raises :class:`PrismError`
    with ``timeout_field`` and ``timeout_fix``, a failed rank one with ``failure_field``.
    ``progress`` (a tqdm bar) follows the count rank 0 reports."""
    workdir = Path(workdir)
    job_file, log = workdir / "job.json", workdir / "torchrun.log"
    job_file.write_text(json.dumps({**job, "dir": str(workdir)}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", module, str(job_file)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads_per_rank)}
    deadline = time.monotonic() + timeout_s
    with open(log, "w") as out, _sigterm_interrupts():
        # torchrun gets a session of its own, so that a terminal's Ctrl-C reaches only this
        # process and is passed on once: a second signal during torchrun's shutdown stops
        # it from waiting for its ranks to flush.
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_ends_with_parent if sys.platform.startswith("linux") else None)
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    _stop(proc)
                    raise PrismError(f"{timeout_field}: {what} was stopped after {timeout_s:g} s; {timeout_fix}",
                                     field=timeout_field)
                _show(progress, workdir)
                time.sleep(0.1)
        except KeyboardInterrupt:
            _stop(proc)
            raise
    _show(progress, workdir)
    if proc.returncode != 0:
        raise PrismError(f"{what} failed: {_first_error(workdir, proc.returncode)}; every rank's output is "
                         f"kept in {_keep(log)}", field=failure_field)


#: prctl's option number for the signal a process gets when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def _ends_with_parent() -> None:
    """In torchrun's child process before it starts (Linux): SIGTERM when the process that
    started it dies, even by SIGKILL, so that torchrun stops its ranks rather than running
    the job on for nobody (prctl PR_SET_PDEATHSIG, man 2 prctl)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@contextmanager
def _sigterm_interrupts():
    """SIGTERM raises KeyboardInterrupt while torchrun runs, so that a scheduler's kill is
    passed on as Ctrl-C is, for callers other than the CLI (which does this for itself)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # Python delivers signals to the main thread only
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to torchrun, which passes it to its ranks and waits for them; killed if it
    outlives its grace or on a second Ctrl-C."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.kill()
        proc.wait()


def _show(progress, workdir: Path) -> None:
    path = workdir / "progress"
    if progress is not None and path.exists():
        done = int(path.read_text())
        if progress.total is not None and done > progress.total:
            progress.total = done  # steps timed again in place of disturbed ones (measure.steal_retakes)
        progress.update(done - progress.n)


def _first_error(workdir: Path, returncode: int) -> str:
    """The error of the rank that failed first, as :func:`worker_main` recorded it."""
    errors = [json.loads(p.read_text()) for p in workdir.glob("error-rank*.json")]
    if not errors:
        return (f"torchrun exited with code {returncode} and no rank reported an error (a rank killed by a "
                f"signal, e.g. out of memory)")
    first = min(errors, key=lambda e: e["time_ns"])
    return f"rank {first['rank']} raised {first['error']}"


def _keep(log: Path) -> str:
    """A copy of ``log`` that outlives the caller's (usually temporary) folder."""
    fd, kept = tempfile.mkstemp(prefix="prism-torchrun-", suffix=".log")
    os.close(fd)
    shutil.copyfile(log, kept)
    return kept


def report_progress(job: dict, done: int) -> None:
    """Rank 0's count of finished units (steps, tasks) for the front-end's progress bar."""
    path = Path(job["dir"]) / "progress"
    tmp = path.with_name(".progress.tmp")
    tmp.write_text(str(done))
    os.replace(tmp, path)  # the front-end never reads half a number


def worker_main(run: Callable[[dict], object]) -> None:
    """A rank's entry: ``run`` the job in the JSON file named by argv[1]; see the module doc."""
    signal.signal(signal.SIGTERM, _interrupt)
    job = json.loads(Path(sys.argv[1]).read_text())
    try:
        run(job)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        rank = int(os.environ.get("RANK", 0))
        lines = str(exc).strip().splitlines()
        error = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
        record = {"rank": rank, "time_ns": time.time_ns(), "error": error}
        (Path(job["dir"]) / f"error-rank{rank}.json").write_text(json.dumps(record))
        raise  # the traceback goes to the log the front-end keeps


#: MASTER_PORT of a SLURM job that sets none: this plus the job id modulo 10,000, so two
#: jobs sharing a first node do not collide.
SLURM_PORT_BASE = 20000


@dataclass(frozen=True)
class Cluster:
    """Where one rank of a distributed job stands: its rank among ``world``, its node and
    its place on it. Ranks per node are the same on every node."""

    rank: int
    world: int
    local_rank: int
    ranks_per_node: int
    node: int
    nodes: int
    launcher: str  # torchrun | slurm
    host: str


def _int(environ, name: str, fix: str) -> int:
    try:
        return int(environ[name])
    except (KeyError, ValueError):
        raise PrismError(f"{name}: expected an integer in the environment, got {environ.get(name)!r}; {fix}",
                         field=name) from None


def _slurm_tasks_per_node(environ, nodes: int, ntasks: int) -> list[int]:
    """Tasks on each node of the step, from SLURM's compact ``2(x3),1`` form."""
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        text = environ.get(name)
        if text:
            counts = []
            for item in text.split(","):
                m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
                if not m:
                    raise PrismError(f"{name}: cannot read {text!r} (expected SLURM's form, e.g. 2(x3),1)",
                                     field=name)
                counts += [int(m.group(1))] * int(m.group(2) or 1)
            return counts
    if ntasks % nodes:
        raise PrismError(f"SLURM_NTASKS: {ntasks} tasks do not split evenly over SLURM_NNODES={nodes} nodes; "
                         f"run the same number of tasks on every node (srun --ntasks-per-node=N)",
                         field="SLURM_NTASKS")
    return [ntasks // nodes] * nodes


def cluster_env(environ=None) -> Cluster | None:
    """This process's place in a distributed job, from its launcher's environment; None
    for a process started on its own (or a job of one rank).

    - ``torchrun`` (single- or multi-node) sets RANK, WORLD_SIZE, LOCAL_RANK,
      LOCAL_WORLD_SIZE, GROUP_RANK (the node), MASTER_ADDR and MASTER_PORT.
    - ``srun`` sets SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, SLURM_NNODES
      and SLURM_(STEP_)TASKS_PER_NODE; MASTER_ADDR defaults to SLURM_LAUNCH_NODE_IPADDR
      (the node srun was started on: the batch script's, the job's first) and MASTER_PORT
      to :data:`SLURM_PORT_BASE` + SLURM_JOB_ID mod 10,000. The torch variables are set
      from them, so that ``init_process_group`` reads them as under torchrun.

    torchrun's variables win where both are set (torchrun started by srun).

    Raises
    ------
    PrismError
        naming the variable, for a value that is not a number, ranks that differ per node,
        or a SLURM job with no MASTER_ADDR to be had.
    """
    env = os.environ if environ is None else environ
    host = socket.gethostname()
    if "RANK" in env and "WORLD_SIZE" in env:
        fix = "start the ranks with torchrun (it sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE)"
        world = _int(env, "WORLD_SIZE", fix)
        if world <= 1:
            return None
        rank = _int(env, "RANK", fix)
        local_rank = _int(env, "LOCAL_RANK", fix)
        per_node = _int(env, "LOCAL_WORLD_SIZE", fix)
        if world % per_node:
            raise PrismError(f"LOCAL_WORLD_SIZE: {per_node} ranks on this node do not divide WORLD_SIZE={world}; "
                             f"start the same --nproc_per_node on every node", field="LOCAL_WORLD_SIZE")
        node = _int(env, "GROUP_RANK", fix) if "GROUP_RANK" in env else rank // per_node
        return Cluster(rank, world, local_rank, per_node, node, world // per_node, "torchrun", host)
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        fix = "run prism sample as the tasks of srun (srun sets the SLURM_ variables)"
        world = _int(env, "SLURM_NTASKS", fix)
        if world <= 1:
            return None
        rank, local_rank = _int(env, "SLURM_PROCID", fix), _int(env, "SLURM_LOCALID", fix)
        nodes, node = _int(env, "SLURM_NNODES", fix), _int(env, "SLURM_NODEID", fix)
        counts = _slurm_tasks_per_node(env, nodes, world)
        if len(set(counts)) != 1 or sum(counts) != world:
            raise PrismError(f"SLURM_TASKS_PER_NODE: tasks per node {counts} are not the same on every node "
                             f"(or do not add up to SLURM_NTASKS={world}); use srun --ntasks-per-node=N",
                             field="SLURM_TASKS_PER_NODE")
        addr = env.get("MASTER_ADDR") or env.get("SLURM_LAUNCH_NODE_IPADDR")
        if not addr:
            raise PrismError("MASTER_ADDR: not set and SLURM gives no SLURM_LAUNCH_NODE_IPADDR; export "
                             "MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1) before srun",
                             field="MASTER_ADDR")
        port = env.get("MASTER_PORT") or str(SLURM_PORT_BASE + int(env.get("SLURM_JOB_ID", "0") or 0) % 10000)
        if environ is None:  # what init_process_group("env://") reads
            os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local_rank),
                              LOCAL_WORLD_SIZE=str(counts[0]), GROUP_RANK=str(node), MASTER_ADDR=addr,
                              MASTER_PORT=port)
        return Cluster(rank, world, local_rank, counts[0], node, nodes, "slurm", host)
    return None

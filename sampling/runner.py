"""``prism sample``: run a sampling plan and store every timed repeat.

The run resumes: tasks (op, pass, dtype, shape) that ``output_dir`` already holds for
this hardware with all their repeats are skipped, and the budget left is the budget
minus the time earlier runs of the same plan spent. A new run always gets a new file.

On one host, compute ops are timed in this process and collectives by a torchrun job of
``sampling.collective_world_size`` local ranks. Started as the ranks of a distributed job
(``torchrun`` on one or many nodes, or ``srun``: :func:`sampling.launch.cluster_env`),
``prism sample`` samples the cluster as it is (:func:`_sample_cluster`):

1. rank 0 takes the store's writer lock, joins runs killed earlier, finds what is stored
   and opens the run; every rank learns it (a gloo broadcast);
2. the ranks jointly time the collectives over sub-groups covering the topology
   (:func:`sampling.plan.group_shapes`, :func:`sampling.collectives.time_collectives`);
3. every rank times the compute plan (per-GPU speed differences are measured), its rows
   tagged with its rank; a compute task is done per rank;
4. every rank writes its parts and a rank record (:func:`predictor.data.store.mark_rank`:
   host, node, status; refreshed as it goes); rank 0 waits for every record to be final,
   reports by rank and host each rank that failed, or went silent for
   ``sampling.rank_timeout_s`` (hung or lost), and joins the parts into one run. A lost
   peer in a collective times out after the same setting; the ranks then go on with
   their compute ops. Interrupted, rank 0 joins the run only when every rank has flushed;
   otherwise the next run joins it (resume).
"""
from __future__ import annotations

import math
import os
import platform
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig
from tqdm import tqdm

from predictor.core.errors import PrismError
from predictor.core.files import writable
from predictor.core.ops import OPS
from predictor.core.profiles import section, this_cpu, usable_cores
from predictor.core.specs import HardwareConfig, SamplingConfig
from predictor.data import store
from predictor.latency.origins import CO_RUN_ORIGINS, FRAMEWORK, GAPS_S, STEP_GAP_S, is_gap_row
from sampling import kernels
from sampling.collectives import BLOCK_BYTES, time_collectives
from sampling.cpu.co_run import Neighbour, can_co_run, co_run_tasks, dense_targets
from sampling.cpu.steal import read_ticks, steal_share
from sampling.framework import LAYERS, framework_rows
from sampling.launch import Cluster, cluster_env, run_torchrun
from sampling.plan import Plan, Task, in_collective_job, make_plan, round_repeats, target_calls, task_key
from sampling.timers import make_timer

#: What the collective job may take beyond its share of the budget: torchrun's start and
#: the message size under way at the deadline.
COLLECTIVE_GRACE_S = 120
#: The key of the in-situ framework sample (:mod:`sampling.framework`) among the tasks a
#: store holds: one per store and hardware, taken with the plan's ``dispatch``.
FRAMEWORK_TASK = ("framework",)
#: The key of the co-run phase (:mod:`sampling.cpu.co_run`): one per store and hardware.
CO_RUN_TASK = ("co-run",)
#: Set by a Ctrl-C while :func:`_remembered_interrupts` holds; see there.
_STOP = threading.Event()


@contextmanager
def _remembered_interrupts():
    """Ctrl-C raises KeyboardInterrupt as ever, and is also remembered. Python drops an
    exception raised while it runs a destructor or a garbage collector's callback (it prints
    "Exception ignored in ..."), so a Ctrl-C that lands there would be lost and the run would
    go on to its end; :func:`_compute_loop` checks before each call. A Ctrl-C the caller
    ignores (``nohup``) stays ignored."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return

    def interrupt(signum, frame):
        _STOP.set()
        raise KeyboardInterrupt

    _STOP.clear()
    signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _STOP.clear()


@dataclass
class SamplingReport:
    """What a ``prism sample`` invocation did."""

    run_file: str | None
    status: str  # complete | budget (tasks left when it ran out) | interrupted | nothing-to-do
    plan_id: str
    rows: int
    elapsed_s: float
    shapes_per_op: dict = field(default_factory=dict)  # this run's distinct shapes
    resumed_tasks: int = 0  # tasks found done in earlier runs of the plan
    resumed_repeats: int = 0  # repeats stored of the tasks an earlier run left part-done (this run adds the rest)
    remaining_tasks: int = 0
    failures: list = field(default_factory=list)
    recovered: list = field(default_factory=list)
    retaken: int = 0  # compute calls timed again because the hypervisor took CPU time during them
    rank: int = 0  # this process's rank in a cluster job (0 on one host)
    ranks: list = field(default_factory=list)  # a cluster job's rank records (rank 0's report)


def _device(hw: HardwareConfig) -> torch.device:
    if hw.device.kind == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise PrismError(f"hardware={hw.name}: needs a CUDA GPU and torch sees none on this "
                         f"machine; sample the CPU with hardware=local-cpu, or run on a GPU host", field='hardware')
    return torch.device("cuda")


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return this_cpu()


def _calibrate(device: torch.device, dtype: str) -> dict:
    """A 2048^3 matmul and a 256 MiB copy: the run's own peak and bandwidth figures."""
    t = kernels.TORCH_DTYPES[dtype]
    timer = make_timer(device, torch.get_num_threads(), 0)
    a = torch.randn(2048, 2048, dtype=t, device=device)
    mm = float(np.median(timer.time(lambda: a @ a, repeats=5, warmup=2)))
    x = torch.empty(1 << 26, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    cp = float(np.median(timer.time(lambda: y.copy_(x), repeats=5, warmup=1)))
    return {"matmul_flops": 2 * 2048 ** 3 / (mm * 1e-6), "copy_bytes_per_s": 2 * x.numel() * 4 / (cp * 1e-6),
            "dtype": dtype}


def _stored_counts(df: pd.DataFrame) -> Counter:
    """Repeats stored per task key (a collective's keyed by its group's placement, nodes x
    ranks per node); the co-run phase and the framework sample count once each."""
    counts = Counter()
    co_run = df["origin"].isin(CO_RUN_ORIGINS) if "origin" in df else pd.Series(False, index=df.index)
    if co_run.any():
        counts[CO_RUN_TASK] = 1
    df = df[~co_run & ~is_gap_row(df)]  # a collective's gap-curve repeats come with its own, in one block
    df = df.assign(nodes=df["nodes"].fillna(1).astype(int), ranks_per_node=df["ranks_per_node"].fillna(1).astype(int))
    for (op, pass_, dtype), g in df.groupby(["op", "pass", "dtype"]):
        cols = list(OPS[op].shape)
        where = ["nodes", "ranks_per_node"] if OPS[op].collective else []
        for values, n in g.groupby(cols + where, dropna=False).size().items():
            values = values if isinstance(values, tuple) else (values,)
            counts[task_key(op, pass_, dtype, dict(zip(cols, values)), tuple(values[len(cols):]) or (1, 1))] += int(n)
    if "origin" in df and (df["origin"] == FRAMEWORK).any():
        counts[FRAMEWORK_TASK] = 1
    return counts


def _complete(counts: Counter, sc: SamplingConfig) -> set:
    """Keys of the tasks with all their repeats stored: ``sc.repeats``, the collective
    job's ``sc.collective_repeats``, one for the co-run phase and the framework sample."""
    def needed(key) -> int:
        if isinstance(key, tuple):
            return 1
        return sc.collective_repeats if in_collective_job(key.split("|", 1)[0]) else sc.repeats
    return {key for key, n in counts.items() if n >= needed(key)}


def _done_tasks(output_dir: Path, plan: Plan, hardware: str, by_rank: bool = False) -> tuple[Counter | dict, float]:
    """Repeats stored per task key for ``hardware`` over every run of the store
    (:func:`_stored_counts`), and the time earlier runs of this plan spent. ``by_rank``:
    the compute tasks' counts per rank that timed them ({rank: Counter}, rows of a
    one-process run counting as rank 0's) and the collective job's under -1."""
    counts, spent, runs = ({} if by_rank else Counter()), 0.0, {}
    for f in store.run_files(output_dir):
        meta = store.read_run_metadata(f)
        if meta.get("plan_id") == plan.plan_id:
            spent += float(meta.get("elapsed_s", 0.0))
        df = store.read_samples(f)
        store.refuse_copied_run(f, df, runs)  # read file by file: a copy would count its repeats and time twice
        df = df[df.hardware == hardware]
        if not by_rank:
            counts.update(_stored_counts(df))
            continue
        collective = df["op"].map(in_collective_job).astype(bool)
        counts.setdefault(-1, Counter()).update(_stored_counts(df[collective]))
        ranks = df["rank"].fillna(0).astype(int) if "rank" in df else pd.Series(0, index=df.index)
        for r, g in df[~collective].groupby(ranks[~collective]):
            counts.setdefault(int(r), Counter()).update(_stored_counts(g))
    return counts, spent


def _run_collectives(tasks: list[Task], sc: SamplingConfig, hw: HardwareConfig, device, writer,
                     share_s: float, device_name: str, progress: bool) -> None:
    """Time ``tasks`` under torchrun (:mod:`sampling.collectives`), the rows going to
    ``writer``'s run as parts; the ranks stop taking tasks after ``share_s`` seconds."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    job = {
        "backend": backend, "repeats": sc.collective_repeats, "warmup": sc.warmup, "deadline": time.time() + share_s,
        "tasks": _task_dicts(tasks),
        "output_dir": str(writer.output_dir), "run_id": writer.run_id, "metadata": writer.metadata,
        "hardware": hw.name, "device_name": device_name, "flush_every_s": sc.flush_every_s,
    }
    what = f"collective sampling ({sc.collective_world_size} {backend} ranks)"
    with tempfile.TemporaryDirectory(prefix="prism-collectives-") as tmp, \
            tqdm(total=len(tasks), desc="collectives", unit="size", disable=not progress, file=sys.stderr) as bar:
        run_torchrun("sampling.collectives", job, sc.collective_world_size, Path(tmp), what=what,
                     timeout_s=share_s + COLLECTIVE_GRACE_S, timeout_field="sampling.ops",
                     timeout_fix=f"a collective hung; check that {sc.collective_world_size} {backend} ranks can "
                                 f"connect on this host, or leave the collectives out of sampling.ops",
                     failure_field="sampling.ops", progress=bar)


def _task_dicts(tasks: list[Task]) -> list[dict]:
    """Collective tasks as the ranks read them (:func:`sampling.collectives.time_collectives`)."""
    return [{"op": t.call.op, "pass": t.call.pass_, "dtype": t.dtype, "shape": t.call.shape_dict,
             "nodes": t.call.nodes, "ranks_per_node": t.call.ranks_per_node} for t in tasks]


def _rows(task: Task, latencies: list[float], base: dict, first: int = 0, steal: float | None = None) -> list[dict]:
    now = datetime.now(timezone.utc)
    call = task.call
    return [dict(base, op=call.op, **{"pass": call.pass_}, dtype=task.dtype, **call.shape_dict,
                 latency_us=lat, repeat=first + r, timestamp=now,
                 steal=None if steal is None or math.isnan(steal) else steal) for r, lat in enumerate(latencies)]


def _compute_loop(tasks: list[Task], sc: SamplingConfig, device, timer, writer, base: dict, deadline_wall: float,
                  failures: list, progress: bool, on_flush=None, neighbour: Neighbour | None = None,
                  stored: dict | None = None, retaken: list | None = None) -> str:
    """Time ``tasks`` into ``writer`` until done ("end-of-plan") or past ``deadline_wall``
    ("deadline"); a task the device cannot run goes to ``failures``. ``on_flush()`` is
    called after each flush (a cluster rank's heartbeat). The repeats a task still needs
    (``sc.repeats`` less the ``stored`` ones of a resumed run) are split over
    ``sc.rounds`` passes over all the tasks, so that they span the phase rather than one
    moment of it. With a ``neighbour``, each task is timed alone and beside it in one pass
    (:mod:`sampling.cpu.co_run`: the pair is its measurement). A call timed while the hypervisor
    took more than ``sc.max_steal`` of the busy CPU time (:mod:`sampling.cpu.steal`) is timed
    again after the last round, at most ``sc.steal_retakes`` times, its key appended to
    ``retaken`` each time; each row stores the steal share of the call it came from."""
    rounds, stored = (1 if neighbour else sc.rounds), stored or {}
    calls = []  # (round, task, repeats before this round's, this round's)
    for task in tasks:
        done = stored.get(task.key, 0)
        for r, n in enumerate(round_repeats(max(0, sc.repeats - done), rounds)):
            if n:
                calls.append((r, task, done, n))
                done += n
    calls.sort(key=lambda c: c[0])  # stable: the plan's order within a round
    desc = "beside a rank" if neighbour else "compute ops"
    bar = tqdm(calls, desc=desc, unit="call", disable=not progress, file=sys.stderr, mininterval=0.5)
    last_flush, failed, retakes = time.monotonic(), set(), Counter()
    try:
        for r, task, first, repeats in bar:  # iterates ``calls`` as it grows by retakes
            if _STOP.is_set():
                raise KeyboardInterrupt
            if time.time() > deadline_wall:
                return "deadline"
            if task.key in failed:
                continue
            call = task.call
            bar.set_postfix_str(f"round {r + 1}/{rounds} {call.op} {call.pass_}", refresh=False)
            try:
                fn = kernels.build(call.op, call.pass_, call.shape_dict, task.dtype, device)
                host = OPS[call.op].host
                before = read_ticks()
                timed = (neighbour.origins(fn, timer, repeats, sc.warmup, host) if neighbour else
                         {base["origin"]: timer.time(fn, repeats, sc.warmup, host=host)})
                steal = steal_share(before, read_ticks())
            except (RuntimeError, MemoryError) as exc:  # e.g. a shape the device cannot hold
                failures.append({"task": task.key, "error": str(exc).splitlines()[0]})
                failed.add(task.key)
                continue
            finally:
                fn = None  # free this shape's operands before the next one allocates
            if steal > sc.max_steal and retakes[task.key] < sc.steal_retakes:
                retakes[task.key] += 1
                calls.append((r, task, first, repeats))
                bar.total += 1
                if retaken is not None:
                    retaken.append(task.key)
                continue
            for origin, latencies in timed.items():
                writer.add(_rows(task, latencies, dict(base, origin=origin), first, steal))
            if time.monotonic() - last_flush > sc.flush_every_s:
                writer.flush()
                last_flush = time.monotonic()
                if on_flush is not None:
                    on_flush()
    finally:
        bar.close()
    return "end-of-plan"


def _co_run_work(sc: SamplingConfig, hw: HardwareConfig, plan: Plan, device) -> tuple[list[Task], list[str]]:
    """The co-run phase's tasks and the neighbour's models; none where it has nothing to time
    (no compute op of the targets' in the plan, as ``sampling.ops=[all_reduce]``), so that a
    run without it is complete, not a task always "still to do"."""
    if not (sc.co_run_share > 0 and can_co_run(device, hw.node.gpus_per_node, sc.threads)):
        return [], []
    tasks, targets = co_run_tasks(plan.compute, target_calls(sc, hw), hw), dense_targets(sc.targets)
    return (tasks, targets) if tasks and targets else ([], [])


def _sample_co_run(sc: SamplingConfig, tasks: list[Task], targets: list[str], device, timer, writer, base: dict,
                   deadline_wall: float, failures: list, progress: bool) -> None:
    """The targets' longest compute shapes, each timed alone and beside a neighbouring rank
    (:mod:`sampling.cpu.co_run`), for ``sampling.co_run_share`` of the budget at most."""
    if progress:
        print(f"prism sample: beside a rank: {len(tasks)} of the targets' compute shapes, each timed alone and "
              f"beside a process training {', '.join(targets)}", file=sys.stderr)
    try:
        with Neighbour(targets) as neighbour:
            _compute_loop(tasks, sc, device, timer, writer, base,
                          min(deadline_wall, time.time() + sc.co_run_share * sc.budget_s), failures, progress,
                          neighbour=neighbour)
    except RuntimeError as exc:  # the neighbour did not start: the plan's samples stand without it
        failures.append({"task": "co-run", "error": str(exc)})


def _sample_framework(sc: SamplingConfig, hw: HardwareConfig, device: torch.device, writer, base: dict,
                      failures: list, progress: bool) -> None:
    """The framework time, measured in the reference model's steps (:mod:`sampling.framework`)."""
    if progress:
        how = "profiled" if device.type == "cpu" else "host-timed"
        print(f"prism sample: framework time: {sc.repeats} {how} steps of the reference model at "
              f"{len(LAYERS)} depths", file=sys.stderr)
    try:
        rows = framework_rows(sc.repeats, hw, device, sc.dtypes[0], sc.seed)
    except (RuntimeError, OSError, PrismError) as exc:  # the ops' samples stand without it
        failures.append({"task": "framework", "error": str(exc).splitlines()[0]})
        return
    now, seen, out = datetime.now(timezone.utc), Counter(), []
    for row in rows:
        key = (row["op"], row["pass"], row.get("launches"), row.get("blocks"))
        out.append(dict(base, **row, repeat=seen[key], timestamp=now))
        seen[key] += 1
    writer.add(out)


def _metadata(sc: SamplingConfig, plan: Plan, hw: HardwareConfig, device, resumed: int) -> dict:
    """A run's metadata at its start (``ended`` and ``elapsed_s`` are set as it ends)."""
    return {
        "plan_id": plan.plan_id, "hardware": hw.name, "sampling": asdict(sc),
        "plan": {"compute_tasks": len(plan.compute), "collective_tasks": len(plan.collectives),
                 "max_call_ms": plan.max_call_ms, "estimated_s": plan.estimated_s,
                 "resumed_tasks": resumed, "collective_coverage": plan.collective_coverage()},
        "warmup": sc.warmup, "repeats": sc.repeats, "rounds": sc.rounds, "collective_repeats": sc.collective_repeats,
        "threads": sc.threads,
        # computed before each timed collective, and before the gap curve's repeats
        "collective_gap_s": STEP_GAP_S if device.type == "cpu" else 0.0,
        "collective_gaps_s": list(GAPS_S) if device.type == "cpu" else [],
        "collective_block_bytes": BLOCK_BYTES,  # sizes timed round by round: sampling.collectives.blocks
        "clock": "perf_counter_ns" if device.type == "cpu" else "cuda_event+l2_flush; host ops perf_counter_ns",
        "versions": {"torch": torch.__version__, "python": platform.python_version(),
                     "numpy": np.__version__, "pandas": pd.__version__},
        "calibration": _calibrate(device, sc.dtypes[0]),
        "host": socket.gethostname(), "started": datetime.now(timezone.utc).isoformat(),
        "ended": "running", "elapsed_s": 0.0,  # how the run ended: end-of-plan | deadline | interrupted
    }


def run_sampling(cfg: DictConfig, progress: bool = True) -> SamplingReport:
    """Run ``cfg.sampling`` on ``cfg.hardware`` into ``cfg.output_dir``, the only writer of
    that store while it runs (:func:`predictor.data.store.writer_lock`); see module doc."""
    sc = section(cfg, "sampling", SamplingConfig)
    hw = section(cfg, "hardware", HardwareConfig)
    _threads_fit(sc)
    cluster = cluster_env()
    if cluster is not None:  # the store made, and written to, before any work
        output_dir = writable("output_dir", store.store_folder(cfg.output_dir, "output_dir"), folder=True)
        return _sample_cluster(sc, hw, cluster, output_dir, progress)
    plan = make_plan(sc, hw)
    device = _device(hw)
    if device.type == "cuda" and plan.collectives and sc.collective_world_size > torch.cuda.device_count():
        raise PrismError(f"sampling.collective_world_size={sc.collective_world_size}: this host has "
                         f"{torch.cuda.device_count()} GPU(s), one per rank; lower it to the GPUs here, or leave the "
                         f"collectives out of sampling.ops (one GPU: README, Ground truth on a lent GPU)",
                         field="sampling.collective_world_size")
    cores = usable_cores()
    if device.type == "cpu" and plan.collectives and sc.collective_world_size > cores:
        # ranks sharing a core wait on each other's time slices, not on the collective
        raise PrismError(f"sampling.collective_world_size={sc.collective_world_size}: one core per rank, and this "
                         f"machine has {cores} for this process; set it to {cores} or fewer, or leave the "
                         f"collectives out of sampling.ops", field="sampling.collective_world_size")
    output_dir = writable("output_dir", store.store_folder(cfg.output_dir, "output_dir"), folder=True)
    with store.writer_lock(output_dir) as note:
        if note:
            print(f"prism sample: note: {note}", file=sys.stderr)
        with _remembered_interrupts():
            return _sample(sc, hw, plan, device, output_dir, progress)


def _threads_fit(sc: SamplingConfig) -> None:
    """Refuse more compute threads than cores this process may use: threads sharing a core
    time each other, not the op (``prism measure`` refuses the same of its ranks)."""
    cores = usable_cores()
    if sc.threads > cores:
        raise PrismError(f"sampling.threads={sc.threads}: needs {sc.threads} cores, this machine has {cores} for this "
                         f"process; set sampling.threads={cores} or fewer", field="sampling.threads")


def _sample(sc: SamplingConfig, hw: HardwareConfig, plan: Plan, device: torch.device, output_dir: Path,
            progress: bool) -> SamplingReport:
    """The tasks of ``plan`` not yet in ``output_dir``, measured and stored as a new run."""
    recovered = [str(p) for p in store.recover_unfinished(output_dir)]
    store.refuse_mixed_threads(output_dir, hw.name, "output_dir", threads=sc.threads)
    counts, spent = _done_tasks(output_dir, plan, hw.name)
    done = _complete(counts, sc)
    todo_compute = [t for t in plan.compute if t.key not in done]
    todo_coll = [t for t in plan.collectives if t.key not in done]
    framework = "dispatch" in sc.ops and FRAMEWORK_TASK not in done
    co_tasks, co_targets = _co_run_work(sc, hw, plan, device) if CO_RUN_TASK not in done else ([], [])
    co_run = bool(co_tasks)
    resumed = len(plan.compute) + len(plan.collectives) - len(todo_compute) - len(todo_coll)
    part_done = sum(counts.get(t.key, 0) for t in todo_compute + todo_coll)
    budget = sc.budget_s - spent
    if not (todo_compute or todo_coll or framework or co_run) or budget <= 0:
        return SamplingReport(None, "nothing-to-do", plan.plan_id, 0, 0.0, resumed_tasks=resumed,
                              remaining_tasks=len(todo_compute) + len(todo_coll) + framework + co_run,
                              recovered=recovered)

    torch.manual_seed(sc.seed)
    timer = make_timer(device, sc.threads, hw.memory.l2_bytes)
    device_name = _device_name(device)
    run_id = store.new_run_id(hw.name)
    metadata = _metadata(sc, plan, hw, device, resumed)
    writer = store.RunWriter(output_dir, run_id, metadata)
    base = dict(hardware=hw.name, device_name=device_name, world_size=1, ranks_per_node=1, nodes=1,
                run_id=run_id, host=socket.gethostname(), torch_version=torch.__version__,
                backend=device.type, origin="sampled", rank=0)
    start = time.monotonic()
    deadline_wall = time.time() + budget
    ended, failures, retaken = "end-of-plan", [], []
    try:
        if todo_coll:
            share = budget * sc.collective_share if todo_compute else budget
            try:
                _run_collectives(todo_coll, sc, hw, device, writer, share, device_name, progress)
            except PrismError as exc:  # the compute ops are still worth their share
                failures.append({"task": "collectives", "error": str(exc)})
        ended = _compute_loop(todo_compute, sc, device, timer, writer, base, deadline_wall, failures, progress,
                              stored=counts, retaken=retaken)
        if ended == "end-of-plan" and framework:
            _sample_framework(sc, hw, device, writer, base, failures, progress)
        if ended == "end-of-plan" and co_run:
            _sample_co_run(sc, co_tasks, co_targets, device, timer, writer, base, deadline_wall, failures, progress)
    except KeyboardInterrupt:
        ended = "interrupted"
    finally:
        elapsed = time.monotonic() - start
        writer.update_metadata(ended=ended, elapsed_s=elapsed, failures=failures, steal_retaken=len(retaken))
        run_file = writer.close()
    report = SamplingReport(str(run_file) if run_file else None, ended, plan.plan_id, 0, elapsed,
                            failures=failures, resumed_tasks=resumed, resumed_repeats=part_done, recovered=recovered,
                            retaken=len(retaken))
    stored = set()
    if run_file is not None:
        df = store.read_samples(run_file)
        report.rows = len(df)
        report.shapes_per_op = {op: int(g[list(OPS[op].shape)].drop_duplicates().shape[0])
                                for op, g in df.groupby("op")}
        stored = _complete(counts + _stored_counts(df), sc)
        disturbed = stalls_note(df)
        if disturbed:
            print(f"prism sample: {disturbed}", file=sys.stderr)
    report.remaining_tasks = sum(t.key not in stored for t in todo_compute + todo_coll) + (
        framework and FRAMEWORK_TASK not in stored) + (co_run and CO_RUN_TASK not in stored)
    if ended != "interrupted":
        report.status = "budget" if report.remaining_tasks else "complete"
    if report.status == "budget" and not report.rows and time.time() > deadline_wall:
        # a rows-0 report reads like a measurement that found nothing: say the budget never reached one
        left = f" ({budget:.0f} s of it left after earlier runs of this plan)" if spent else ""
        print(f"prism sample: note: no row stored: sampling.budget_s={sc.budget_s:g}{left} ran out during start-up "
              f"(the collectives' torchrun) before a first timed call; run again with sampling.budget_s="
              f"{math.ceil(spent) + 60} or more (into the same output_dir, a run resumes what is stored)",
              file=sys.stderr)
    return report


def stalls_note(df) -> str | None:
    """What ``prism sample`` says at its end where shapes of the run it stored stalled (a
    repeat over :data:`~predictor.latency.artifacts.DISTURBED_SPREAD` times the shape's
    median: another process held the CPU), or None: those stalls would become the models'
    upper tails, which prism train counts and, where many are, refuses."""
    from predictor.latency.artifacts import DISTURBED_SHARE, DISTURBED_SPREAD, disturbed_shapes

    counted = disturbed_shapes(df)
    if not counted["disturbed"]:
        return None
    ops = ", ".join(f"{k} {n}" for k, n in counted["by_op"].items())
    return (f"WARNING: {counted['disturbed']} of {counted['shapes']} shapes stalled while timed (slowest repeat over "
            f"{DISTURBED_SPREAD:g}x their median: another process held the CPU): {ops}; sample on an idle machine "
            f"(prism train counts them, and refuses a store where over {DISTURBED_SHARE:.0%} of the shapes are)")


#: How long an interrupted rank 0 waits for the other ranks to flush before it leaves the
#: run's parts for the next run to join (torchrun kills its ranks 30 s after a signal).
INTERRUPTED_JOIN_S = 10.0


def _placement_error(placement: list, cl: Cluster) -> str | None:
    """Why the ranks' (node, local rank) do not make ``cl.nodes`` x ``cl.ranks_per_node``, or None."""
    expected = {(n, k) for n in range(cl.nodes) for k in range(cl.ranks_per_node)}
    got = {(node, local) for node, local, _ in placement}
    if got != expected or len(placement) != len(expected):
        return (f"the ranks' (node, local rank) are {sorted(got)}, not {cl.nodes} nodes x {cl.ranks_per_node} ranks; "
                f"start the same number of ranks on every node")
    return None


def _setup(sc: SamplingConfig, hw: HardwareConfig, plan: Plan, cl: Cluster, device, output_dir: Path,
           placement: list, stack: ExitStack) -> dict:
    """Rank 0's part of the start: the lock, earlier runs joined, what is stored, the run
    opened (its writer in the result). What every rank needs goes in the result."""
    note = stack.enter_context(store.writer_lock(output_dir))
    recovered = [str(p) for p in store.recover_unfinished(output_dir)]
    counts, spent = _done_tasks(output_dir, plan, hw.name, by_rank=True)
    done = {r: _complete(c, sc) for r, c in counts.items()}
    todo_coll = [t.key for t in plan.collectives if t.key not in done.get(-1, set())]
    todo = {r: [t.key for t in plan.compute if t.key not in done.get(r, set())] for r in range(cl.world)}
    stored = {r: {k: counts[r][k] for k in keys if counts.get(r, {}).get(k)} for r, keys in todo.items()}
    resumed = len(plan.collectives) - len(todo_coll) + sum(len(plan.compute) - len(v) for v in todo.values())
    budget = sc.budget_s - spent
    setup = {"note": note, "recovered": recovered, "resumed": resumed, "todo_coll": todo_coll, "todo": todo,
             "stored": stored,
             "budget": budget, "start": time.time()}
    if budget <= 0 or not (todo_coll or any(todo.values())):
        return {**setup, "run_id": None}
    run_id = store.new_run_id(hw.name)
    metadata = _metadata(sc, plan, hw, device, resumed)
    metadata["cluster"] = {"launcher": cl.launcher, "world": cl.world, "nodes": cl.nodes,
                           "ranks_per_node": cl.ranks_per_node,
                           "hosts": sorted({e[2] for e in placement})}
    writer = store.RunWriter(output_dir, run_id, metadata, prefix=f"rank{cl.rank:05d}")
    return {**setup, "run_id": run_id, "metadata": metadata, "writer": writer}


def _silence_allowed(record: dict | None, timeout_s: float) -> float:
    """How long a running rank may be silent: a rank in the collectives twice as long, as it
    may be waiting out a lost peer's timeout before it goes on with its compute ops."""
    return 2 * timeout_s if record is not None and record.get("phase") == "collectives" else timeout_s


def _wait_for_ranks(parts_dir: Path, world: int, timeout_s: float, started: float) -> dict[int, dict]:
    """Rank records once every rank's is final, or until the unfinished ones have been
    silent too long (:func:`_silence_allowed`; counted from ``started`` for a rank with no
    record yet)."""
    while True:
        records = store.rank_records(parts_dir)
        now = time.time()
        waiting = False
        for r in range(world):
            rec = records.get(r)
            if rec is not None and rec["status"] != "running":
                continue
            last = datetime.fromisoformat(rec["updated"]).timestamp() if rec else started
            waiting |= now - last < _silence_allowed(rec, timeout_s)
        if not waiting:
            return records
        time.sleep(0.5)


def _rank_problems(records: dict[int, dict], world: int, timeout_s: float) -> list[dict]:
    """A failure entry, by rank and host, for each rank that failed, went silent or never reported."""
    problems = []
    for r in range(world):
        rec = records.get(r)
        if rec is None:
            problems.append({"task": f"rank {r}", "error": "never reported (lost before it started sampling, "
                                                          "or the store is not shared with its host)"})
        elif rec["status"] == "running":
            problems.append({"task": f"rank {r} on host {rec['host']} (node {rec['node']})",
                             "error": f"silent for {_silence_allowed(rec, timeout_s):g} s since {rec['updated']} "
                                      f"(hung or lost, in its {rec.get('phase', '?')}); its "
                                      f"{rec['rows']} flushed row(s) are kept, a resumed run measures the rest"})
        elif rec["status"] == "failed":
            problems.append({"task": f"rank {r} on host {rec['host']} (node {rec['node']})",
                             "error": rec.get("error", "failed")})
    return problems


def _sample_cluster(sc: SamplingConfig, hw: HardwareConfig, cl: Cluster, output_dir: Path,
                    progress: bool) -> SamplingReport:
    """One rank of a cluster sampling job (module doc)."""
    import torch.distributed as dist

    if hw.device.kind == "cpu":
        device, backend = torch.device("cpu"), "gloo"
    else:
        _device(hw)  # a GPU profile needs CUDA
        device, backend = torch.device(f"cuda:{cl.local_rank}"), "nccl"
        torch.cuda.set_device(device)
    plan = make_plan(sc, hw, (cl.nodes, cl.ranks_per_node))
    dist.init_process_group(backend, timeout=timedelta(seconds=sc.rank_timeout_s))
    control = dist.new_group(backend="gloo") if backend != "gloo" else None
    everyone = [None] * cl.world
    dist.all_gather_object(everyone, (cl.node, cl.local_rank, cl.host, plan.plan_id), group=control)
    placement = [(node, local) for node, local, _, _ in everyone]
    with ExitStack() as stack:
        setup = [None]
        if cl.rank == 0:
            problem = _placement_error([e[:3] for e in everyone], cl)
            if problem is None and len({e[3] for e in everyone}) > 1:
                problem = ("the ranks made different plans (plan ids " + ", ".join(sorted({e[3] for e in everyone}))
                           + "); start every rank with the same command, configuration and conf/ files")
            try:
                if problem:
                    raise PrismError(f"sampling: {problem}", field="sampling")
                setup = [_setup(sc, hw, plan, cl, device, output_dir, everyone, stack)]
            except PrismError as exc:
                setup = [{"error": str(exc), "field": exc.field}]
            except Exception as exc:  # every rank stops with rank 0's word, not on a closed connection
                setup = [{"error": f"sampling: rank 0 on host {cl.host} could not open the run: "
                                   f"{type(exc).__name__}: {exc}", "field": "output_dir"}]
        shared = [{k: v for k, v in setup[0].items() if k != "writer"}] if cl.rank == 0 else setup
        dist.broadcast_object_list(shared, src=0, group=control)
        info = shared[0]
        if "error" in info:
            dist.destroy_process_group()
            raise PrismError(info["error"], field=info["field"])
        if cl.rank == 0 and info["note"]:
            print(f"prism sample: note: {info['note']}", file=sys.stderr)
        if info["run_id"] is None:
            dist.destroy_process_group()
            return SamplingReport(None, "nothing-to-do", plan.plan_id, 0, 0.0, resumed_tasks=info["resumed"],
                                  remaining_tasks=len(info["todo_coll"]) + sum(map(len, info["todo"].values())),
                                  recovered=info["recovered"], rank=cl.rank)
        return _cluster_run(sc, hw, plan, cl, device, backend, control, placement, output_dir, info,
                            setup[0].get("writer"), progress)


def _cluster_run(sc, hw, plan, cl, device, backend, control, placement, output_dir, info, writer,
                 progress) -> SamplingReport:
    """The measuring part of :func:`_sample_cluster`, from an open run to its join."""
    import torch.distributed as dist

    run_id, started = info["run_id"], info["start"]
    if writer is None:
        writer = store.RunWriter(output_dir, run_id, info["metadata"], prefix=f"rank{cl.rank:05d}", owner=False)
    todo_coll = [t for t in plan.collectives if t.key in set(info["todo_coll"])]
    mine = set(info["todo"].get(cl.rank, []))
    todo_compute = [t for t in plan.compute if t.key in mine]
    record = {"host": cl.host, "node": cl.node, "local_rank": cl.local_rank, "pid": os.getpid(), "status": "running",
              "phase": "collectives" if todo_coll else "compute", "rows": 0, "failures": [], "retaken": 0}
    retaken = []

    def mark(**changes):
        record.update(changes, rows=writer.rows_written, retaken=len(retaken))
        store.mark_rank(writer.parts_dir, cl.rank, record)

    mark()
    torch.manual_seed(sc.seed + cl.rank)
    device_name = _device_name(device)
    base = dict(hardware=hw.name, device_name=device_name, world_size=cl.world, ranks_per_node=cl.ranks_per_node,
                nodes=cl.nodes, run_id=run_id, host=cl.host, torch_version=torch.__version__,
                backend=device.type, origin="sampled", rank=cl.rank)
    deadline = started + info["budget"]
    failures, ended, broken = [], "end-of-plan", False
    t0 = time.monotonic()
    try:
        try:
            if todo_coll:
                any_compute = any(info["todo"].values())
                job = {"repeats": sc.collective_repeats, "warmup": sc.warmup, "flush_every_s": sc.flush_every_s,
                       "deadline": started + (info["budget"] * sc.collective_share if any_compute else info["budget"])}
                with tqdm(total=len(todo_coll), desc="collectives", unit="task", file=sys.stderr,
                          disable=not progress or cl.rank != 0) as bar:
                    try:
                        time_collectives(_task_dicts(todo_coll), job, cl.rank, placement, device, writer,
                                         dict(base, backend=backend), control,
                                         on_done=lambda n: (bar.update(n - bar.n), mark()))
                    except RuntimeError as exc:  # a peer lost or hung: the group's timeout, or a closed connection
                        broken = True
                        failures.append({"task": "collectives", "error": str(exc).strip().splitlines()[0]})
            mark(phase="compute")
            timer = make_timer(device, sc.threads, hw.memory.l2_bytes)
            ended = _compute_loop(todo_compute, sc, device, timer, writer, base, deadline, failures,
                                  progress and cl.rank == 0, on_flush=mark, stored=info["stored"].get(cl.rank),
                                  retaken=retaken)
            writer.flush()
            mark(status=ended, failures=failures)
        except KeyboardInterrupt:
            ended = "interrupted"
            writer.flush()
            mark(status=ended, failures=failures)
        except Exception as exc:  # noqa: BLE001 - reported by rank and host; the others go on
            lines = str(exc).strip().splitlines()
            error = f"{type(exc).__name__}: {lines[0] if lines else ''}"
            try:
                writer.flush()
            finally:
                mark(status="failed", error=error, failures=failures)
            failures.append({"task": f"rank {cl.rank} on host {cl.host}", "error": error})
            ended = "failed"
    finally:
        elapsed = time.monotonic() - t0
    report = SamplingReport(None, ended, plan.plan_id, writer.rows_written, elapsed, failures=failures,
                            resumed_tasks=info["resumed"], recovered=info["recovered"], rank=cl.rank)
    if not broken and ended != "interrupted":
        try:
            dist.destroy_process_group()
        except RuntimeError:
            pass
    if cl.rank != 0:  # a failed rank's exit code stays 0, or torchrun would stop the others: rank 0 reports it
        report.status = ended if ended in ("interrupted", "failed") else "done"
        return report
    return _join(sc, plan, cl, writer, report, ended, started, elapsed)


def _join(sc, plan, cl, writer, report: SamplingReport, ended: str, started: float, elapsed: float) -> SamplingReport:
    """Rank 0's end: wait for the ranks' records, report the missing, join the run."""
    timeout = INTERRUPTED_JOIN_S if ended == "interrupted" else sc.rank_timeout_s
    try:
        records = _wait_for_ranks(writer.parts_dir, cl.world, timeout, started)
    except KeyboardInterrupt:
        records, ended = store.rank_records(writer.parts_dir), "interrupted"
    problems = _rank_problems(records, cl.world, timeout)
    report.ranks = [records[r] for r in sorted(records)]
    report.retaken = sum(r.get("retaken", 0) for r in report.ranks)
    report.failures = [f for f in report.failures if not f["task"].startswith("rank ")] + problems
    writer.update_metadata(ended=ended, elapsed_s=elapsed, failures=report.failures, steal_retaken=report.retaken)
    if ended == "interrupted" and any(records.get(r, {}).get("status", "running") == "running"
                                      for r in range(cl.world)):
        report.status = "interrupted"  # a rank may still write: the next run joins the parts
        return report
    run_file = store.finish_run(writer.parts_dir)
    report.run_file = str(run_file) if run_file else None
    if run_file is not None:
        df = store.read_samples(run_file)
        report.rows = len(df)
        report.shapes_per_op = {op: int(g[list(OPS[op].shape)].drop_duplicates().shape[0])
                                for op, g in df.groupby("op")}
    counts, _ = _done_tasks(writer.output_dir, plan, writer.metadata["hardware"], by_rank=True)
    done = {r: _complete(c, sc) for r, c in counts.items()}
    left = sum(t.key not in done.get(-1, set()) for t in plan.collectives)
    left += sum(t.key not in done.get(r, set()) for r in range(cl.world) for t in plan.compute)
    report.remaining_tasks = left
    if ended == "interrupted":
        report.status = "interrupted"
    elif problems:
        report.status = "incomplete"
    else:
        report.status = "budget" if left else "complete"
    return report

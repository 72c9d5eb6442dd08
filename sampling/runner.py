"""``prism sample``: run a sampling plan and store every timed repeat.

The run resumes: tasks (op, pass, dtype, shape) that ``output_dir`` already holds for
this hardware with all their repeats are skipped, and the budget left is the budget
minus the time earlier runs of the same plan spent. A new run always gets a new file.
"""
from __future__ import annotations

import platform
import socket
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig
from tqdm import tqdm

from predictor.core.errors import PrismError
from predictor.core.ops import OPS
from predictor.core.profiles import section
from predictor.core.specs import HardwareConfig, SamplingConfig
from predictor.data import store
from sampling import kernels
from sampling.launch import run_torchrun
from sampling.plan import Plan, Task, make_plan, task_key
from sampling.timers import make_timer

#: What the collective job may take beyond its share of the budget: torchrun's start and
#: the message size under way at the deadline.
COLLECTIVE_GRACE_S = 120


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
    remaining_tasks: int = 0
    failures: list = field(default_factory=list)
    recovered: list = field(default_factory=list)


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
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


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


def _stored_keys(df: pd.DataFrame, repeats: int) -> set:
    """Keys of the tasks with at least ``repeats`` stored rows."""
    keys = set()
    for (op, pass_, dtype), g in df.groupby(["op", "pass", "dtype"]):
        cols = list(OPS[op].shape)
        for values, n in g.groupby(cols, dropna=False).size().items():
            values = values if isinstance(values, tuple) else (values,)
            if n >= repeats:
                keys.add(task_key(op, pass_, dtype, dict(zip(cols, values))))
    return keys


def _done_tasks(output_dir: Path, plan: Plan, hardware: str, repeats: int) -> tuple[set, float]:
    """Task keys stored for ``hardware``, and the time earlier runs of this plan spent."""
    done, spent = set(), 0.0
    for f in store.run_files(output_dir):
        if store.read_run_metadata(f).get("plan_id") == plan.plan_id:
            spent += float(store.read_run_metadata(f).get("elapsed_s", 0.0))
        df = store.read_samples(f)
        done |= _stored_keys(df[df.hardware == hardware], repeats)
    return done, spent


def _run_collectives(tasks: list[Task], sc: SamplingConfig, hw: HardwareConfig, device, writer,
                     share_s: float, device_name: str, progress: bool) -> None:
    """Time ``tasks`` under torchrun (:mod:`sampling.collectives`), the rows going to
    ``writer``'s run as parts; the ranks stop taking tasks after ``share_s`` seconds."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    job = {
        "backend": backend, "repeats": sc.repeats, "warmup": sc.warmup, "deadline": time.time() + share_s,
        "tasks": [{"op": t.call.op, "dtype": t.dtype, "shape": t.call.shape_dict} for t in tasks],
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


def _rows(task: Task, latencies: list[float], base: dict) -> list[dict]:
    now = datetime.now(timezone.utc)
    call = task.call
    return [dict(base, op=call.op, **{"pass": call.pass_}, dtype=task.dtype, **call.shape_dict,
                 latency_us=lat, repeat=r, timestamp=now) for r, lat in enumerate(latencies)]


def run_sampling(cfg: DictConfig, progress: bool = True) -> SamplingReport:
    """Run ``cfg.sampling`` on ``cfg.hardware`` into ``cfg.output_dir``, the only writer of
    that store while it runs (:func:`predictor.data.store.writer_lock`); see module doc."""
    sc = section(cfg, "sampling", SamplingConfig)
    hw = section(cfg, "hardware", HardwareConfig)
    plan = make_plan(sc, hw)
    device = _device(hw)
    output_dir = Path(cfg.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    with store.writer_lock(output_dir) as note:
        if note:
            print(f"prism sample: note: {note}", file=sys.stderr)
        return _sample(sc, hw, plan, device, output_dir, progress)


def _sample(sc: SamplingConfig, hw: HardwareConfig, plan: Plan, device: torch.device, output_dir: Path,
            progress: bool) -> SamplingReport:
    """The tasks of ``plan`` not yet in ``output_dir``, measured and stored as a new run."""
    recovered = [str(p) for p in store.recover_unfinished(output_dir)]
    done, spent = _done_tasks(output_dir, plan, hw.name, sc.repeats)
    todo_compute = [t for t in plan.compute if t.key not in done]
    todo_coll = [t for t in plan.collectives if t.key not in done]
    resumed = len(plan.compute) + len(plan.collectives) - len(todo_compute) - len(todo_coll)
    budget = sc.budget_s - spent
    if not (todo_compute or todo_coll) or budget <= 0:
        return SamplingReport(None, "nothing-to-do", plan.plan_id, 0, 0.0, resumed_tasks=resumed,
                              remaining_tasks=len(todo_compute) + len(todo_coll), recovered=recovered)

    torch.manual_seed(sc.seed)
    timer = make_timer(device, sc.threads, hw.memory.l2_bytes)
    device_name = _device_name(device)
    run_id = store.new_run_id(hw.name)
    metadata = {
        "plan_id": plan.plan_id, "hardware": hw.name, "sampling": asdict(sc),
        "plan": {"compute_tasks": len(plan.compute), "collective_tasks": len(plan.collectives),
                 "max_call_ms": plan.max_call_ms, "estimated_s": plan.estimated_s,
                 "resumed_tasks": resumed},
        "warmup": sc.warmup, "repeats": sc.repeats, "threads": sc.threads,
        "clock": "perf_counter_ns" if device.type == "cpu" else "cuda_event+l2_flush",
        "versions": {"torch": torch.__version__, "python": platform.python_version(),
                     "numpy": np.__version__, "pandas": pd.__version__},
        "calibration": _calibrate(device, sc.dtypes[0]),
        "host": socket.gethostname(), "started": datetime.now(timezone.utc).isoformat(),
        "ended": "running", "elapsed_s": 0.0,  # how the run ended: end-of-plan | deadline | interrupted
    }
    writer = store.RunWriter(output_dir, run_id, metadata)
    base = dict(hardware=hw.name, device_name=device_name, world_size=1, ranks_per_node=1, nodes=1,
                run_id=run_id, host=socket.gethostname(), torch_version=torch.__version__,
                backend=device.type, origin="sampled")
    start = time.monotonic()
    deadline_wall = time.time() + budget
    ended, failures = "end-of-plan", []
    try:
        if todo_coll:
            share = budget * sc.collective_share if todo_compute else budget
            try:
                _run_collectives(todo_coll, sc, hw, device, writer, share, device_name, progress)
            except PrismError as exc:  # the compute ops are still worth their share
                failures.append({"task": "collectives", "error": str(exc)})
        bar = tqdm(todo_compute, desc="compute ops", unit="shape", disable=not progress, file=sys.stderr,
               mininterval=0.5)
        last_flush = time.monotonic()
        for task in bar:
            if time.time() > deadline_wall:
                ended = "deadline"
                break
            call = task.call
            bar.set_postfix_str(f"{call.op} {call.pass_}", refresh=False)
            try:
                fn = kernels.build(call.op, call.pass_, call.shape_dict, task.dtype, device)
                latencies = timer.time(fn, sc.repeats, sc.warmup)
            except (RuntimeError, MemoryError) as exc:  # e.g. a shape the device cannot hold
                failures.append({"task": task.key, "error": str(exc).splitlines()[0]})
                continue
            finally:
                fn = None  # free this shape's operands before the next one allocates
            writer.add(_rows(task, latencies, base))
            if time.monotonic() - last_flush > sc.flush_every_s:
                writer.flush()
                last_flush = time.monotonic()
        bar.close()
    except KeyboardInterrupt:
        ended = "interrupted"
    finally:
        elapsed = time.monotonic() - start
        writer.update_metadata(ended=ended, elapsed_s=elapsed, failures=failures)
        run_file = writer.close()
    report = SamplingReport(str(run_file) if run_file else None, ended, plan.plan_id, 0, elapsed,
                            failures=failures, resumed_tasks=resumed, recovered=recovered)
    stored = set()
    if run_file is not None:
        df = store.read_samples(run_file)
        report.rows = len(df)
        report.shapes_per_op = {op: int(g[list(OPS[op].shape)].drop_duplicates().shape[0])
                                for op, g in df.groupby("op")}
        stored = _stored_keys(df, sc.repeats)
    report.remaining_tasks = sum(t.key not in stored for t in todo_compute + todo_coll)
    if ended != "interrupted":
        report.status = "budget" if report.remaining_tasks else "complete"
    return report

"""Operators beside a neighbouring rank: what a rank's compute costs while another rank
computes on the core beside it (issue 18).

On a CPU, ``prism measure`` runs each rank on a core of the same host, and the sampler
times each op alone. On runs P and Q of the ground-truth suite the 1-rank layouts at their
own shapes came within 6%, while 16 of the 20 2-rank layouts ran 17-40% slower than
predicted: the two ranks share the caches and memory of one host.
``experiments/co_runner/bench_co_runner.py`` measured small's step ops beside a copy looping the same
call on the other core at x1.01-1.08 (a first
x1.87 had the copy on the timed call's own core), and two independent ``small`` steps side by side at x1.00-1.15.
So ``prism sample`` times a share of the
plan's targeted compute tasks once more beside a *neighbour*: a spawned process training
the plan's dense targets (PRISM's reference model, each at its own size, in turn) on a
core of its own, a real rank's mix of GEMMs, element-wise ops and framework calls. Each
task is timed alone and then beside the neighbour, back to back, so that a drift of the
machine's speed falls on both.

The runner times the tasks with :class:`Neighbour` (``prism sample``'s compute loop). The
rows' origins are :data:`ALONE` and :data:`BESIDE`; ``prism train`` keeps them out of
the op models and stores each op's median slowdown (beside / alone at the same shape) in
the manifest (:func:`predictor.latency.adjustments.co_run.slowdowns`), which the composer applies to
the calls of a rank that shares a synchronous host with other ranks
(:func:`predictor.workload.decompose.neighbours`).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from itertools import zip_longest

import torch

from predictor.core.ops import OPS, Call
from predictor.core.profiles import load_model
from predictor.core.specs import HardwareConfig
from predictor.latency.origins import CO_RUN_ALONE as ALONE
from predictor.latency.origins import CO_RUN_BESIDE as BESIDE
from sampling.model import Transformer, loss_fn
from sampling.plan import Task, call_seconds, in_collective_job

#: Targeted tasks timed beside the neighbour per (op, pass): the longest the plan's targets
#: make under :data:`CALL_CAP_MS` (the ops a rank spends its step in, and the least noisy).
TASKS_PER_OP = 4
#: The longest estimated call taken: a share of a few minutes' budget covers every op's.
CALL_CAP_MS = 10.0
#: The most the neighbour may take to build its models and run its first step.
NEIGHBOUR_START_S = 60.0


def co_run_tasks(tasks: list[Task], targeted: list[Call], hw: HardwareConfig,
                 per_op: int = TASKS_PER_OP) -> list[Task]:
    """Of ``tasks``, per compute (op, pass), the ``per_op`` longest at a shape of
    ``targeted`` (:func:`sampling.plan.target_calls`) under :data:`CALL_CAP_MS`, taken in
    turns (every op's longest, then every op's second...), so that a spent share leaves
    each op its longest."""
    shapes = {(c.op, c.pass_, tuple((k, c.shape_dict[k]) for k in OPS[c.op].shape)) for c in targeted}
    by_op: dict[tuple, list] = {}
    for task in tasks:
        call = task.call
        if in_collective_job(call.op):
            continue
        if (call.op, call.pass_, tuple((k, call.shape_dict[k]) for k in OPS[call.op].shape)) not in shapes:
            continue
        ms = call_seconds(call.op, call.pass_, call.shape_dict, task.dtype, hw) * 1e3
        if ms <= CALL_CAP_MS:
            by_op.setdefault((call.op, call.pass_), []).append((ms, task))
    ranked = [[t for _, t in sorted(group, key=lambda x: -x[0])[:per_op]] for group in by_op.values()]
    return [t for turn in zip_longest(*ranked) for t in turn if t is not None]


def can_co_run(device: torch.device, ranks_per_host: int, threads: int) -> bool:
    """Whether this host runs ranks side by side on cores of their own, and has a core for
    the neighbour: a CPU whose profile puts several ranks on a host."""
    return device.type == "cpu" and ranks_per_host > 1 and (os.cpu_count() or 1) >= threads + 1


def _neighbour(targets: list[str], running, idle, stop) -> None:
    """Train the dense ``targets`` in turn, one step each, while ``running`` is set;
    ``idle`` is set between steps while it is not."""
    # Ctrl-C reaches the whole process group: the parent stops this process (Neighbour.__exit__, or at its exit as
    # a daemon), which must not die of it with a traceback of its own. Ignoring it drops the one that may be pending
    # from the imports, during which the parent's block (Neighbour.__enter__) held it off.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    trainers = []
    for name in targets:
        model = load_model(name)
        net = Transformer(model)
        ids = torch.randint(0, model.vocab_size, (1, model.seq_length + 1))
        trainers.append((net, torch.optim.AdamW(net.parameters(), lr=1e-4), ids[:, :-1], ids[:, 1:]))
    step = 0
    while not stop.is_set():
        if not running.is_set():
            idle.set()
            running.wait(timeout=0.05)
            continue
        idle.clear()
        net, optimizer, x, y = trainers[step % len(trainers)]
        loss_fn(net(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1


def dense_targets(targets: list[str]) -> list[str]:
    """The targets the reference model trains: the dense ones (it has no experts)."""
    return [name for name in targets if not load_model(name).num_experts]


class Neighbour:
    """The neighbouring rank (module doc): a spawned process training ``targets`` in turn,
    idle between the tasks; :meth:`origins` times a call alone and then beside it."""

    def __init__(self, targets: list[str]):
        self.targets = targets
        ctx = mp.get_context("spawn")  # a fresh interpreter: no state of this one's torch threads
        self._running, self._idle, self._stop = ctx.Event(), ctx.Event(), ctx.Event()
        self._proc = ctx.Process(target=_neighbour, args=(targets, self._running, self._idle, self._stop),
                                 daemon=True)

    def __enter__(self) -> Neighbour:
        # the child inherits SIGINT blocked until _neighbour ignores it; blocked, not ignored, here, so that a Ctrl-C
        # meanwhile still reaches this process once unblocked
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self._proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        try:
            ready = self._idle.wait(timeout=NEIGHBOUR_START_S)  # its models built
        except KeyboardInterrupt:  # it would see no stop before its models are built, and ignores Ctrl-C
            self._proc.kill()
            self._proc.join()
            raise
        if not ready:
            self.__exit__()
            raise RuntimeError(f"the neighbour ({', '.join(self.targets)}) was not ready within "
                               f"{NEIGHBOUR_START_S:g} s")
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._running.set()
        self._proc.join(timeout=10)
        if self._proc.is_alive():
            self._proc.kill()

    def origins(self, fn, timer, repeats: int, warmup: int, host: bool) -> dict[str, list[float]]:
        """``fn``'s latencies alone and beside the neighbour, by origin (:data:`ALONE`, :data:`BESIDE`)."""
        try:
            alone = timer.time(fn, repeats, warmup, host=host)
            self._running.set()
            time.sleep(0.05)  # the neighbour into its step
            return {ALONE: alone, BESIDE: timer.time(fn, repeats, warmup, host=host)}
        finally:
            self._running.clear()
            time.sleep(0.06)  # past the neighbour's poll: it is in a step or stays idle
            self._idle.wait(timeout=NEIGHBOUR_START_S)  # its step ended: the next task's alone is alone

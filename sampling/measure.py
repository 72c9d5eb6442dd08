"""``prism measure``: time real training steps of one layout (docs/method.md, "measure, validate, calibrate").

:func:`measure` resolves the model, the layout and ``cfg.measure``, runs the reference
workload (:mod:`sampling.reference`) under ``torchrun`` with ``dp·tp·pp`` ranks (gloo on
CPU, NCCL on CUDA) and writes one row per timed step and rank to ``cfg.out``
(:func:`predictor.data.measurements.write_measurements`: atomic, other layouts in the file
kept). Nothing is written until every rank has finished; Ctrl-C, SIGTERM or
``measure.timeout_s`` stop torchrun and leave the file as it was, and an interrupt says how
many steps were timed and lost and how to measure again.
"""
from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig
from tqdm import tqdm

from predictor.core.choices import MeasureDevice, choice
from predictor.core.errors import PrismError
from predictor.core.files import writable
from predictor.core.job import check_gpus
from predictor.core.layout import divisors, resolve_layout, validate_layout
from predictor.core.profiles import load_model, section, usable_cores
from predictor.core.specs import DISTURBING_STEAL, HardwareConfig, MeasureConfig, ModelConfig, ParallelConfig
from predictor.data.measurements import read_measurements, step_times, undisturbed, write_measurements
from predictor.workload.memory import memory_per_gpu
from sampling.launch import run_torchrun
from sampling.runner import _device

#: What the reference workload runs (:mod:`sampling.reference`); other values are refused.
SHARDINGS = ("none", "fsdp", "zero3")
SCHEDULES = ("1f1b", "gpipe")
#: A mean steal share over the steps at which the report says so (sampling.cpu.steal): 2.2% over a
#: suite run's measure stage came with passes up to 25% slow.
STEAL_NOTED = 0.01


@dataclass
class MeasureReport:
    """What one ``prism measure`` run measured and where it wrote it."""

    path: str
    layout_id: str
    hardware: str
    backend: str
    ranks: int
    steps: int  # timed and stored
    median_step_s: float  # over the undisturbed steps (measurements.undisturbed), each the slowest rank's time
    p95_step_s: float
    wall_s: float  # the whole run: torchrun start, warm-up, timed steps, write
    replaced: str | None = None  # the earlier measurement of this layout in the file, which these steps replaced
    steal: float | None = None  # mean share of the busy CPU time the hypervisor took during the steps; None: unknown
    disturbed: int = 0  # of the steps, those timed under more steal than DISTURBING_STEAL: left out of the figures

    def to_dict(self) -> dict:
        return asdict(self)

    def format(self) -> str:
        return "\n".join([
            f"layout       {self.layout_id}",
            f"ranks        {self.ranks} ({self.backend}, hardware={self.hardware})",
            f"step time    median {self.median_step_s * 1e3:.1f} ms   p95 {self.p95_step_s * 1e3:.1f} ms   "
            f"({self.steps} steps, slowest rank per step"
            + (f"; {self.disturbed} of them timed under steal, left out)" if self.disturbed else ")"),
            f"wall         {self.wall_s:.1f} s",
            f"written to   {self.path}",
        ] + ([f"steal        {self.steal:.1%} of the busy CPU time went to other guests of the host during the "
              f"steps (hypervisor steal): a step above {DISTURBING_STEAL:.0%} is timed again, at most "
              f"measure.steal_retakes times"]
             if self.steal is not None and self.steal >= STEAL_NOTED else [])
          + ([f"replaced     {self.replaced}"] if self.replaced else []))


def layout_id(model: ModelConfig, par: ParallelConfig) -> str:
    """A readable, stable name of a measured layout, e.g.
    ``tiny seq128 dp2 tp1 pp1 mbs1 gbs8 rc=none 1f1b``; sharding is appended when not
    ``none``, and model fields changed from ``conf/model/<name>.yaml`` (other than the
    sequence length) follow the name in brackets: ``gpt3-1.3b[num_layers=4] seq1024 ...``."""
    name = model.name
    try:
        base = asdict(load_model(model.name))
        changed = [f"{k}={v}" for k, v in asdict(model).items() if k != "seq_length" and base[k] != v]
        if changed:
            name += f"[{','.join(changed)}]"
    except PrismError:
        pass  # a model with no conf entry: its name is all there is
    text = (f"{name} seq{model.seq_length} dp{par.dp} tp{par.tp} pp{par.pp} mbs{par.micro_batch_size} "
            f"gbs{par.global_batch_size} rc={par.recompute} {par.schedule}")
    return text if par.sharding == "none" else f"{text} {par.sharding}"


def check_layout(model: ModelConfig, par: ParallelConfig) -> None:
    """Raise :class:`PrismError` naming the field if the reference workload cannot run
    ``par`` (with its global batch resolved): the general rules of
    :func:`~predictor.workload.memory.validate_layout`, then what this workload leaves out."""
    validate_layout(model, par)
    if par.cp != 1:
        raise PrismError(f"parallel.cp={par.cp}: the reference workload has no context parallelism; "
                         f"measure with parallel.cp=1", field='parallel.cp')
    if par.ep != 1:
        raise PrismError(f"parallel.ep={par.ep}: the reference models have no experts; set parallel.ep=1",
                         field='parallel.ep')
    if par.sequence_parallel:
        raise PrismError("parallel.sequence_parallel=true: the reference workload keeps TP activations "
                         "replicated; set parallel.sequence_parallel=false", field='parallel.sequence_parallel')
    if par.attention not in ("auto", "flash"):  # auto: the eager reference's own, SDPA
        raise PrismError(f"parallel.attention={par.attention}: the reference model runs torch's fused SDPA "
                         f"only; set parallel.attention=auto", field='parallel.attention')
    if par.recompute == "per_op":
        raise PrismError("parallel.recompute=per_op: the reference model recomputes none, the attention core "
                         "(selective) or whole blocks (full); choose one of those", field='parallel.recompute')
    if par.sharding not in SHARDINGS:
        raise PrismError(f"parallel.sharding={par.sharding}: the reference workload shards with FSDP2 only; "
                         f"choose one of: {', '.join(SHARDINGS)}", field='parallel.sharding')
    if par.schedule not in SCHEDULES or par.vpp != 1:
        raise PrismError(f"parallel.schedule={par.schedule} (vpp={par.vpp}): the reference workload runs one "
                         f"stage per rank; choose parallel.schedule among {', '.join(SCHEDULES)} with "
                         f"parallel.vpp=1", field='parallel.schedule')
    if model.num_kv_heads % par.tp:
        raise PrismError(f"parallel.tp={par.tp}: does not divide model.num_kv_heads={model.num_kv_heads} of "
                         f"{model.name}; the reference workload does not replicate KV heads, pick tp among "
                         f"{divisors(model.num_kv_heads)}", field='parallel.tp')
    if par.dp > 1 and par.tp > 1 and par.sharding == "none":
        raise PrismError(f"parallel.sharding=none with parallel.dp={par.dp} and parallel.tp={par.tp}: DDP cannot "
                         f"reduce tensor-parallel (DTensor) weights; set parallel.sharding=fsdp (FSDP2 with TP, "
                         f"PyTorch's 2-D layout) or use dp=1 or tp=1", field='parallel.sharding')
    if par.pp > 1 and model.tied_embeddings:
        raise PrismError(f"model.tied_embeddings=true with parallel.pp={par.pp}: the first and last stages "
                         f"would train separate copies of the embedding; set parallel.pp=1 or "
                         f"model.tied_embeddings=false", field='model.tied_embeddings')
    micro_batches = par.global_batch_size // (par.micro_batch_size * par.dp)
    if par.pp > 1 and par.schedule == "1f1b" and micro_batches < par.pp:
        raise PrismError(f"parallel.global_batch_size={par.global_batch_size}: 1f1b needs at least pp={par.pp} "
                         f"micro-batches, got {micro_batches}; use global_batch_size >= "
                         f"{par.pp * par.micro_batch_size * par.dp}", field='parallel.global_batch_size')


def _settings(mc: MeasureConfig, hw: HardwareConfig, world: int) -> tuple[str, str]:
    """(device type, backend) of ``mc`` on ``hw``, checked; ``auto`` follows the hardware
    profile, so the rows' ``hardware`` names the device that ran them."""
    # trace_steps=0 would write no trace into trace_dir; below 0, the ranks fail after the timed steps
    for name, low in (("steps", 1), ("warmup", 0), ("threads_per_rank", 1), ("trace_steps", 1), ("steal_retakes", 0)):
        if getattr(mc, name) < low:
            raise PrismError(f"measure.{name}={getattr(mc, name)}: must be an integer >= {low}",
                             field=f"measure.{name}")
    if not 0 < mc.timeout_s < math.inf:  # a NaN limit never stops a hung layout
        raise PrismError(f"measure.timeout_s={mc.timeout_s}: must be a positive finite number of seconds, e.g. 900",
                         field='measure.timeout_s')
    choice(MeasureDevice, mc.device, "measure.device", "choose {or_options}", quoted=False)
    device = _device(hw).type
    if mc.device not in ("auto", device):
        raise PrismError(f"measure.device={mc.device}: hardware={hw.name} is a {hw.device.kind} profile; "
                         f"set hardware= to the profile of the device measured, or measure.device=auto",
                         field='measure.device')
    backend = {"cpu": "gloo", "cuda": "nccl"}[device]
    if mc.backend not in ("auto", backend):
        raise PrismError(f"measure.backend={mc.backend}: the reference workload runs {backend} on {device}; "
                         f"set measure.backend=auto", field='measure.backend')
    if device == "cuda" and world > torch.cuda.device_count():
        raise PrismError(f"parallel: dp·tp·pp = {world} ranks need {world} GPUs, this host has "
                         f"{torch.cuda.device_count()}; lower parallel.dp, tp or pp", field='parallel')
    return device, backend


def _output(out, mc: MeasureConfig) -> Path:
    """``out`` once the run's rows can be added to it and its traces written, checked before
    the run rather than after it."""
    if Path(str(out)).suffix.lower() != ".parquet":  # a measurement file is Parquet, whatever it is named
        raise PrismError(f"out={out}: a measurement file is Parquet; name it *.parquet, e.g. "
                         f"out=runs/measured.parquet", field="out")
    path = writable("out", out)
    if path.exists():
        try:
            read_measurements(path)
        except PrismError as exc:
            why = str(exc).split(": ", 1)[-1]  # read_measurements names the file as measured=
            raise PrismError(f"out={path}: exists and is no measurement file to add to ({why}); give a new file "
                             f"name or move it away", field="out") from None
    if mc.trace_dir:
        writable("measure.trace_dir", mc.trace_dir, folder=True)
    return path


def _fits_this_cpu(model: ModelConfig, par: ParallelConfig, world: int, threads: int) -> None:
    """Refuse a CPU run this machine cannot hold: a core per thread of every rank (shared
    cores time each other, not the layout), and the ranks' training memory within RAM
    (:func:`~predictor.workload.memory.memory_per_gpu`, a lower bound: the CPU trains in fp32)."""
    cores = usable_cores()
    if world * threads > cores:
        raise PrismError(f"parallel: dp·tp·pp = {world} rank(s) x measure.threads_per_rank={threads} need "
                         f"{world * threads} cores, this machine has {cores}; lower parallel.dp, tp or pp",
                         field="parallel")
    need = world * memory_per_gpu(model, par).total
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > ram:
        raise PrismError(f"model={model.name}: its {world} rank(s) need at least {need / 2**30:.0f} GiB to train, "
                         f"this machine has {ram / 2**30:.0f} GiB; measure a smaller model here (model=tiny, small)",
                         field="model")


def measure(cfg: DictConfig, progress: bool = True) -> MeasureReport:
    """Train ``cfg.model`` laid out as ``cfg.parallel`` on this machine, time every step
    and add the layout's rows to the Parquet file ``cfg.out``; see the module doc."""
    start = time.monotonic()
    out = cfg.get("out")
    if not out:
        raise PrismError("out=FILE.parquet is required: the measurement file to write "
                         "(layouts already in it are kept)", field='out')
    model = section(cfg, "model", ModelConfig)
    par = resolve_layout(section(cfg, "parallel", ParallelConfig), check_gpus(cfg.get("gpus")))
    mc = section(cfg, "measure", MeasureConfig)
    hw = section(cfg, "hardware", HardwareConfig)
    check_layout(model, par)
    world = par.dp * par.tp * par.pp
    device, backend = _settings(mc, hw, world)
    out = _output(out, mc)
    if device == "cpu":
        _fits_this_cpu(model, par, world, mc.threads_per_rank)
    lid = layout_id(model, par)
    measured_at = datetime.now(timezone.utc).isoformat()

    with tempfile.TemporaryDirectory(prefix="prism-measure-") as tmp:
        workdir = Path(tmp)
        job = {"model": asdict(model), "parallel": asdict(par), "steps": mc.steps, "warmup": mc.warmup,
               "threads_per_rank": mc.threads_per_rank, "backend": backend, "device": device,
               "seed": mc.seed, "trace_dir": str(Path(mc.trace_dir).resolve()) if mc.trace_dir else None,
               "trace_steps": mc.trace_steps, "steal_retakes": mc.steal_retakes, "max_steal": DISTURBING_STEAL}
        with tqdm(total=mc.warmup + mc.steps, desc=lid, unit="step", disable=not progress,
                  file=sys.stderr) as bar:
            try:
                run_torchrun("sampling.reference", job, world, workdir, what=f"measure {lid}",
                             timeout_s=mc.timeout_s, timeout_field="measure.timeout_s",
                             timeout_fix="raise measure.timeout_s or lower measure.steps", failure_field="measure",
                             threads_per_rank=mc.threads_per_rank, progress=bar)
            except KeyboardInterrupt:
                bar.close()
                print(_lost(out, lid, max(0, int(bar.n) - mc.warmup), mc.steps), file=sys.stderr)
                raise
        rows = []
        for rank in range(world):
            result = json.loads((workdir / f"rank{rank}.json").read_text())
            steal = result.get("steal") or [None] * len(result["step_time_s"])
            rows += [{"step": step, "rank": rank, "step_time_s": t, "steal": x}
                     for step, (t, x) in enumerate(zip(result["step_time_s"], steal))]

    frame = pd.DataFrame(rows).assign(
        layout_id=lid, hardware=hw.name, model_json=json.dumps(asdict(model)),
        parallel_json=json.dumps(asdict(par)), threads_per_rank=mc.threads_per_rank, backend=backend,
        measured_at=measured_at)
    replaced = _replaced(out, lid)  # read before the write replaces it
    path = write_measurements(frame, out)
    per_step = step_times(frame)
    kept, steal = undisturbed(per_step).step_time_s.to_numpy(), per_step.steal.dropna()
    return MeasureReport(str(path), lid, hw.name, backend, world, len(per_step), float(np.median(kept)),
                         float(np.quantile(kept, 0.95)), time.monotonic() - start, replaced,
                         float(steal.mean()) if len(steal) else None, len(per_step) - len(kept))


def _lost(out: Path, lid: str, timed: int, steps: int) -> str:
    """What an interrupted measurement says: a layout's steps are written whole, once every
    rank has finished (a partial layout would pass for a whole one in validate and calibrate),
    so the steps timed so far are not kept."""
    return (f"prism measure: interrupted after {timed} of {steps} timed steps of {lid}: none kept (a layout is "
            f"written whole when every rank has finished), {out} is as it was; run the same command again to "
            f"measure the layout from its first step, or lower measure.steps to finish sooner")


def _replaced(out: Path, lid: str) -> str | None:
    """What ``out`` held of layout ``lid``, which a new measurement replaces: its steps, when
    and at how many threads per rank (the layout id leaves the count out)."""
    if not out.exists():
        return None
    old = read_measurements(out)
    old = old[old.layout_id == lid]
    if old.empty:
        return None
    threads = ", ".join(map(str, sorted(old.threads_per_rank.dropna().astype(int).unique())))
    return (f"{old.step.nunique()} steps of this layout measured {str(old.measured_at.iloc[0])[:16]} at {threads} "
            f"thread(s) per rank (to keep both, measure into another out=)")

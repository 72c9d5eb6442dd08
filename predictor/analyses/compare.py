"""``prism compare``: one model and job over several hardware profiles, side by side.

docs/method.md, "Analyses". Each profile is predicted by :func:`predictor.analyses.predict.predict` on
the same model, parallel layout, GPU count and token budget, so a row is exactly what
``prism predict hardware=<profile>`` reports (same draws, same seed); this module only
adds what needs a profile's price or power and puts the rows side by side:

- GPU-hours = days to train x 24 x GPUs, with the time-to-train band (p5, p50, p95);
- cost = GPU-hours x ``hardware.price_per_gpu_hour`` (:attr:`Prediction.cost_usd`);
- energy = GPU-hours x ``hardware.power_w`` x ``pue``. ``power_w`` is the board power
  at its rated maximum (for GH200 the whole CPU + GPU module), so energy is an upper
  bound for the GPUs themselves; node CPUs, memory and network are excluded, and cooling
  and power delivery too unless ``pue`` (power usage effectiveness, default 1.0) adds them.

The layout is held fixed across profiles: the best layout of each hardware may differ
(a tensor-parallel group wider than an NVLink domain, e.g. tp=8 on one-GPU GH200 nodes,
crosses the inter-node network; the notes say where). The domain is a node, except on
GB200/GB300 NVL72 racks, whose 72 GPUs over 18 four-GPU nodes share one NVLink fabric.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import asdict, dataclass, field
from pathlib import Path

from predictor.analyses.predict import Prediction, check_gpus, predict
from predictor.core.errors import PrismError
from predictor.core.layout import resolve_layout
from predictor.core.mesh import tp_span_note
from predictor.core.profiles import CONF_DIR, as_layout, group_options, load_hardware, read_yaml
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig, check_number
from predictor.engine.predictor import DRAWS, TIERS
from predictor.workload.decompose import check_whole_nodes

BAND = ("p5", "p50", "p95")
#: What each evidence tier (:data:`predictor.latency.artifacts.TIERS`) means for a column.
TIER_BASIS = {TIERS[0]: "operator latencies measured on that hardware",
              TIERS[1]: "models fitted to its published GEMM, attention and NCCL microbenchmarks",
              TIERS[2]: "datasheet roofline and network priors alone"}


@dataclass
class HardwareResult:
    """One profile's column of the comparison."""

    hardware: str
    tier: str  # predictor.latency.artifacts.TIERS: what the numbers rest on
    step_time_s: dict  # p5, p50, p95: the hardware's variability (prism predict's step time)
    median_step_80_s: list  # the 80% predictive interval of the run's median step (predictive uncertainty)
    speedup: float  # the first profile's median step / this one's (median_step_s)
    tokens_per_s: float
    mfu: float
    memory_gib: float  # per GPU, the most loaded pipeline stage
    capacity_gib: float
    fits: bool
    time_to_train_days: dict  # p5, p50, p95 (no failures or restarts)
    gpu_hours: dict  # p5, p50, p95
    cost_usd: dict | None  # p5, p50, p95; None without hardware.price_per_gpu_hour
    energy_mwh: dict | None  # p5, p50, p95; None without hardware.power_w
    price_per_gpu_hour: float | None
    power_w: float | None
    gpus_per_node: int
    cdf: dict  # {"t_s": [...], "p": [...]}: the step-time CDF (Prediction.cdf)
    nvlink_domain: int = 0  # GPUs of one NVLink domain (72 on an NVL72 rack of 4-GPU nodes)
    median_step_s: float = 0.0  # the job's median step, prism predict's "median step" (predictive p50)
    median_step_90_s: list = field(default_factory=list)  # its 90% predictive interval
    train_step_s: float | None = None  # the step tokens/s, time, cost and energy rest on (Prediction.train_step_s)
    alike: dict | None = None  # what runs like this one measured against PRISM (the band's basis)


@dataclass
class Comparison:
    model: str
    gpus: int
    layout: dict
    train_tokens: float
    pue: float
    results: list[HardwareResult]
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def gpu_profiles() -> list[str]:
    """Every ``conf/hardware`` profile of a GPU (``device.kind: gpu``): what is compared by default."""
    return [name for name in group_options("hardware")
            if (read_yaml(CONF_DIR / "hardware" / f"{name}.yaml").get("device") or {}).get("kind") == "gpu"]


def check_hardware(hardware: Iterable[HardwareConfig | str] | None) -> list[HardwareConfig | str]:
    """``hardware`` (profiles or ``conf/hardware`` names; None: every GPU profile) as a list,
    if it names at least one profile, every name is known and none twice; else one error
    listing the known names."""
    if hardware is None:
        hardware = gpu_profiles()  # as the command line compares when no hardware= is given
    if isinstance(hardware, str | HardwareConfig):  # one profile
        hardware = [hardware]
    # a dict would be read as its keys, its values dropped; a set has no order to compare in
    if not isinstance(hardware, Iterable) or isinstance(hardware, Mapping | Set):
        raise PrismError(f"hardware={hardware!r}: a list of profiles or conf/hardware names, e.g. "
                         f"['a100-sxm4-80gb', 'h100-sxm']", field="hardware")
    hardware = list(hardware)  # a generator is read once, here
    strange = [h for h in hardware if not isinstance(h, str | HardwareConfig)]
    if strange:
        raise PrismError(f"hardware: {strange[0]!r} is neither a HardwareConfig nor a conf/hardware name",
                         field="hardware")
    names = [h if isinstance(h, str) else h.name for h in hardware]
    options = group_options("hardware")
    unknown = [h for h in hardware if isinstance(h, str) and h not in options]
    if not names or unknown:
        what = ", ".join(f"no conf/hardware/{name}.yaml" for name in unknown) if unknown else "no profile given"
        raise PrismError(f"hardware=[{','.join(names)}]: {what}; choose from: {', '.join(options)} "
                         f"(e.g. hardware=[a100-sxm4-80gb,h100-sxm])", field='hardware')
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise PrismError(f"hardware=[{','.join(names)}]: {', '.join(twice)} given twice; name each profile once "
                         f"(copies of one profile changed in a field need names of their own)", field="hardware")
    return hardware


#: The largest power usage effectiveness taken. PUE is 1.0 at best (The Green Grid's definition,
#: ISO/IEC 30134-2: facility energy over IT energy); the Uptime Institute's annual survey put the
#: industry's average at 2.5 in 2007 and 1.58 in 2023, so past 3 a figure is a typo.
MAX_PUE = 3.0


def check_pue(value) -> float:
    """``pue`` as a float from 1 to :data:`MAX_PUE` (a datacentre cannot use less energy than its IT load)."""
    check_number("pue", value)
    if not 1.0 <= value <= MAX_PUE:
        raise PrismError(f"pue={value}: power usage effectiveness, from 1 to {MAX_PUE:g} (1.0 = GPU board power only; "
                         f"e.g. pue=1.2 adds a 20% facility overhead)", field='pue')
    return float(value)


def median_step(p: Prediction) -> float:
    """The job's median step as ``prism predict`` reports it ("median step"): the p50 of the
    predictive distribution (the composed median where no doubt model applies)."""
    return p.predictive["median_step_s"]["p50"]


def _result(p: Prediction, hw: HardwareConfig, pue: float, baseline_s: float) -> HardwareResult:
    gpu_hours = {k: p.time_to_train_days[k] * 24 * p.gpus for k in BAND}
    return HardwareResult(
        hardware=p.hardware, tier=p.tier, step_time_s={k: p.step_time_s[k] for k in BAND},
        median_step_80_s=p.predictive["interval_s"]["80%"], median_step_s=median_step(p),
        median_step_90_s=list(p.predictive["interval_s"]["90%"]), train_step_s=p.train_step_s,
        alike=p.predictive.get("alike"),
        speedup=baseline_s / median_step(p), tokens_per_s=p.tokens_per_s, mfu=p.mfu,
        memory_gib=p.memory_gib["total"], capacity_gib=p.memory_gib["capacity"], fits=p.fits,
        time_to_train_days=dict(p.time_to_train_days), gpu_hours=gpu_hours, cost_usd=p.cost_usd,
        energy_mwh={k: v * hw.power_w * pue / 1e6 for k, v in gpu_hours.items()} if hw.power_w else None,
        price_per_gpu_hour=hw.price_per_gpu_hour, power_w=hw.power_w, gpus_per_node=hw.node.gpus_per_node,
        cdf=p.cdf, nvlink_domain=hw.nvlink_domain)


#: The model FLOPs utilisation above which a prediction is implausible: large training runs
#: report 38-43% (Llama 3 405B on H100, arXiv 2407.21783 Table 4) to 46-57% (PaLM 540B on
#: TPU v4, arXiv 2204.02311 Table 3, with and without rematerialisation counted).
MFU_PLAUSIBLE = 0.60


def mfu_note(hardware: str, mfu: float) -> str | None:
    """A note where a predicted MFU is above what the hardware's peak allows (over 100%) or
    above :data:`MFU_PLAUSIBLE`: the profile's peak or the models it was priced with are
    likely wrong (a CPU's models sampled on another CPU, a peak figure of another precision)."""
    if not mfu > MFU_PLAUSIBLE:
        return None
    what = ("above the hardware's peak FLOP/s, which no run can reach" if mfu > 1 else
            f"above the {MFU_PLAUSIBLE:.0%} that no large training run reports (Llama 3: 38-43%, PaLM: 46-57%)")
    return (f"{hardware}: MFU {mfu:.1%} is {what}: check its profile's peak (conf/hardware/{hardware}.yaml) and that "
            f"its models were sampled on this hardware")


def _price_source(profiles: list[HardwareConfig]) -> str:
    """Where the profiles' prices come from: conf/hardware's indicative quotes, except where a
    price is not its profile file's (hardware.price_per_gpu_hour= on the command line, or a
    profile built by hand): the user's own, which the report must not call a quote."""
    quoted = "indicative on-demand prices, see conf/hardware"
    given = [hw.name for hw in profiles if hw.price_per_gpu_hour is not None and (
        hw.name not in group_options("hardware") or hw.price_per_gpu_hour != load_hardware(hw.name).price_per_gpu_hour)]
    if not given:
        return quoted
    return (f"the price you gave for {', '.join(given)}, not conf/hardware's indicative one"
            + (f"; the others: {quoted}" if len(given) < len(profiles) else ""))


def compare(model: ModelConfig, hardware: Sequence[HardwareConfig | str] | None, layout: ParallelConfig,
            gpus: int | None = None, *, models_dir: str | Path | None = None, draws: int = DRAWS, seed: int = 0,
            train_tokens: float = 1e12, pue: float = 1.0, framework: str | None = None,
            leave_out: bool = False) -> Comparison:
    """Predict one job on several hardware profiles.

    Parameters
    ----------
    model, layout, gpus
        The job, as :func:`~predictor.analyses.predict.predict` takes it.
    hardware : sequence of HardwareConfig or str, or None
        The profiles, or their ``conf/hardware`` names (None, or :func:`gpu_profiles`: every
        GPU profile), each once, compared in this order (the first is the baseline of
        :attr:`HardwareResult.speedup`).
    models_dir, seed, train_tokens
        As :func:`~predictor.analyses.predict.predict`; ``models_dir`` holds one folder
        per profile.
    draws : int
        Monte Carlo draws per profile; 2000 is ``prism predict``'s, so each column equals
        its prediction.
    pue : float
        Power usage effectiveness (1 to 3), the factor of the energy on the GPUs' board power.
    leave_out : bool
        Leave out, with a note, the profiles whose nodes cannot hold the job's GPUs (12 GPUs
        are no whole number of 8-GPU nodes) rather than refuse the comparison: for a list the
        user did not choose (every GPU profile).

    Returns
    -------
    Comparison
        One :class:`HardwareResult` per profile, in the order given.

    Raises
    ------
    PrismError
        Naming ``hardware`` for an unknown profile, ``pue`` for a value outside 1 to 3, or the
        field :func:`predict` rejects.
    """
    t0 = time.perf_counter()
    profiles = [load_hardware(h) if isinstance(h, str) else h for h in check_hardware(hardware)]
    pue = check_pue(pue)
    unfit = []
    if leave_out:
        total = gpus or resolve_layout(as_layout(layout), None).world_size
        for hw in profiles:
            try:
                check_whole_nodes(check_gpus(total), hw)
            except PrismError as exc:
                unfit.append((hw, exc))
        if len(unfit) == len(profiles):
            raise unfit[0][1]
        left = {id(hw) for hw, _ in unfit}
        profiles = [hw for hw in profiles if id(hw) not in left]
    predictions = [predict(model, hw, layout, gpus, models_dir=models_dir, draws=draws, seed=seed,
                           train_tokens=train_tokens, framework=framework) for hw in profiles]
    baseline = median_step(predictions[0])
    results = [_result(p, hw, pue, baseline) for p, hw in zip(predictions, profiles)]
    first = predictions[0]
    tp = first.layout["tp"]
    notes = [f"energy = GPU-hours x hardware.power_w (rated board power) x pue={pue:g}: node CPUs and network "
             + ("excluded, cooling too (pue=1.2 would add 20%)" if pue == 1.0 else "excluded, cooling via pue"),
             f"cost = GPU-hours x hardware.price_per_gpu_hour ({_price_source(profiles)})",
             "step bands are the hardware's variability (p5-p95: step to step, and what a run draws once, its "
             "slowest GPUs); the median step (prism predict's, the speed-up's basis) and its 80% interval are "
             "the predictive uncertainty's; tokens/s, time, cost and energy rest on "
             "the run's mean step (p50), their bands (p5-p95) on both; failures and restarts are excluded (prism "
             "variability adds them)"]
    notes += [f"{hw.name}: hardware.power_w={hw.power_w:g} W is the whole module's, its CPU included (no GPU-only "
              f"figure is published), so its energy holds what the others' leave out" for hw in profiles
              if hw.power_includes_cpu and hw.power_w]
    notes += [f"{hw.name}: {note}" for hw in profiles if (note := tp_span_note(tp, hw))]
    notes += [f"left out {hw.name}: {first.gpus} GPUs are no whole number of its {hw.node.gpus_per_node}-GPU nodes"
              for hw, _ in unfit]
    notes += [f"{r.hardware}: needs {r.memory_gib:.{1 if r.memory_gib - r.capacity_gib >= 0.05 else 3}f} GiB per GPU "
              f"of {r.capacity_gib:g}: does not fit"
              for r in results if not r.fits]
    notes += [note for r in results if (note := mfu_note(r.hardware, r.mfu))]
    tiers = {r.tier for r in results}
    if len(tiers) > 1:
        notes.append("evidence differs, so do the columns' credibility: "
                     + "; ".join(f"{t}: {TIER_BASIS[t]}" for t in TIERS if t in tiers))
    return Comparison(model=first.model, gpus=first.gpus, layout=first.layout, train_tokens=first.train_tokens,
                      pue=pue, results=results, notes=notes, elapsed_s=time.perf_counter() - t0)

"""``prism compare``: one model and job over several hardware profiles, side by side.

DESIGN.md, "Analyses". Each profile is predicted by :func:`predictor.analyses.predict.predict` on
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
(a tensor-parallel group wider than a node, e.g. tp=8 on one-GPU GH200 nodes, crosses the
inter-node network; the notes say where).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from predictor.app.config import load_config

from predictor.core.specs import HardwareConfig

from predictor.core.profiles import CONF_DIR, group_options, section
from predictor.core.errors import PrismError
from predictor.app.figures import new_figure, save_figure
from predictor.latency.artifacts import TIERS
from predictor.analyses.predict import Prediction, predict

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
    step_time_s: dict  # p5, p50, p95
    speedup: float  # the first profile's median step / this one's
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


def split_hardware(overrides: Sequence[str]) -> tuple[list[str] | None, list[str]]:
    """Take the ``hardware=`` overrides out of ``overrides``.

    Hydra would read ``hardware=[a,b]`` as a list of config-group options to merge into
    one profile, so the list is parsed here instead. ``hardware=[a,b]``, ``hardware=a,b``
    and repeated ``hardware=`` overrides all name several profiles.

    Returns
    -------
    names : list of str or None
        The profiles in the order given, without repeats; None where no ``hardware=`` was
        given.
    rest : list of str
        The other overrides, unchanged.
    """
    names, rest = None, []
    for text in overrides:
        key, sep, value = text.partition("=")
        if key.lstrip("+~") != "hardware" or not sep:
            rest.append(text)
            continue
        names = names or []
        for name in value.strip().removeprefix("[").removesuffix("]").split(","):
            name = name.strip().strip("'\"")
            if name and name not in names:
                names.append(name)
    return names, rest


def gpu_profiles() -> list[str]:
    """Every ``conf/hardware`` profile of a GPU (``device.kind: gpu``): what is compared by default."""
    return [name for name in group_options("hardware")
            if OmegaConf.load(CONF_DIR / "hardware" / f"{name}.yaml").device.kind == "gpu"]


def check_hardware(names: Sequence[str]) -> list[str]:
    """``names`` if each is a ``conf/hardware`` profile; else one error listing the valid ones."""
    options = group_options("hardware")
    unknown = [n for n in names if n not in options]
    if not names or unknown:
        what = f"no conf/hardware/{{{','.join(unknown)}}}.yaml" if unknown else "no profile given"
        raise PrismError(f"hardware=[{','.join(names)}]: {what}; choose from: {', '.join(options)} "
                         f"(e.g. hardware=[a100-sxm4-80gb,h100-sxm])", field='hardware')
    return list(names)


def check_pue(value) -> float:
    """``pue`` as a float >= 1 (a datacentre cannot use less energy than its IT load)."""
    try:
        pue = float(1.0 if value is None else value)
    except (TypeError, ValueError):
        pue = float("nan")  # fails the range check below
    if not pue >= 1.0:
        raise PrismError(f"pue={value}: power usage effectiveness, a number >= 1 (1.0 = GPU board power only; "
                         f"e.g. pue=1.2 adds a 20% facility overhead)", field='pue')
    return pue


def _profile_configs(base: Sequence[str] | DictConfig, names: list[str]) -> list[DictConfig]:
    """The configuration of each profile: ``base`` with its hardware replaced.

    Overrides are composed anew per profile so that ``hardware.*`` overrides in them apply
    to every profile; a composed config gets each profile's file in place of its
    ``hardware`` section (its own ``hardware.*`` edits are dropped with it).
    """
    if isinstance(base, DictConfig):
        configs = []
        for name in names:
            cfg = base.copy()
            cfg.hardware = OmegaConf.load(CONF_DIR / "hardware" / f"{name}.yaml")
            configs.append(cfg)
        return configs
    return [load_config([*base, f"hardware={name}"]) for name in names]


def _result(p: Prediction, hw: HardwareConfig, pue: float, baseline_s: float) -> HardwareResult:
    gpu_hours = {k: p.time_to_train_days[k] * 24 * p.gpus for k in BAND}
    return HardwareResult(
        hardware=p.hardware, tier=p.tier, step_time_s={k: p.step_time_s[k] for k in BAND},
        speedup=baseline_s / p.step_time_s["p50"], tokens_per_s=p.tokens_per_s, mfu=p.mfu,
        memory_gib=p.memory_gib["total"], capacity_gib=p.memory_gib["capacity"], fits=p.fits,
        time_to_train_days=dict(p.time_to_train_days), gpu_hours=gpu_hours, cost_usd=p.cost_usd,
        energy_mwh={k: v * hw.power_w * pue / 1e6 for k, v in gpu_hours.items()} if hw.power_w else None,
        price_per_gpu_hour=hw.price_per_gpu_hour, power_w=hw.power_w, gpus_per_node=hw.node.gpus_per_node,
        cdf=p.cdf)


def compare(base: Sequence[str] | DictConfig = (), hardware: Sequence[str] | None = None,
            draws: int = 2000) -> Comparison:
    """Predict one job on several hardware profiles.

    Parameters
    ----------
    base : sequence of str or DictConfig
        The job: Hydra overrides (``["model=gpt3-175b", "gpus=1024", "parallel.tp=8"]``,
        without ``hardware=``) or a composed configuration. ``pue`` is read from it.
    hardware : sequence of str, optional
        ``conf/hardware`` profile names, compared in this order (the first is the baseline
        of :attr:`HardwareResult.speedup`). Default: every GPU profile.
    draws : int
        Monte Carlo draws per profile; 2000 is ``prism predict``'s, so each column equals
        its prediction.

    Returns
    -------
    Comparison
        One :class:`HardwareResult` per profile, in the order given.

    Raises
    ------
    PrismError
        Naming ``hardware`` for an unknown profile, ``pue`` for a value below 1, or the
        field :func:`predict` rejects.
    """
    t0 = time.perf_counter()
    names = check_hardware(gpu_profiles() if hardware is None else hardware)
    configs = _profile_configs(base, names)
    pue = check_pue(configs[0].get("pue"))
    predictions = [predict(cfg, draws=draws) for cfg in configs]
    profiles = [section(cfg, "hardware", HardwareConfig) for cfg in configs]
    baseline = predictions[0].step_time_s["p50"]
    results = [_result(p, hw, pue, baseline) for p, hw in zip(predictions, profiles)]
    first = predictions[0]
    tp = first.layout["tp"]
    notes = [f"energy = GPU-hours x hardware.power_w (rated board power) x pue={pue:g}: node CPUs and network "
             + ("excluded, cooling too (pue=1.2 would add 20%)" if pue == 1.0 else "excluded, cooling via pue"),
             "cost = GPU-hours x hardware.price_per_gpu_hour (indicative on-demand prices, see conf/hardware)",
             "bands are p5-p95; time to train excludes failures and restarts (prism variability adds them)"]
    notes += [f"{r.hardware}: tp={tp} spans {tp // r.gpus_per_node} nodes of {r.gpus_per_node} GPU(s): "
              f"tensor-parallel collectives cross the inter-node network" for r in results if tp > r.gpus_per_node]
    notes += [f"{r.hardware}: needs {r.memory_gib:.1f} GiB per GPU of {r.capacity_gib:.0f}: does not fit"
              for r in results if not r.fits]
    tiers = {r.tier for r in results}
    if len(tiers) > 1:
        notes.append("evidence differs, so do the columns' credibility: "
                     + "; ".join(f"{t}: {TIER_BASIS[t]}" for t in TIERS if t in tiers))
    return Comparison(model=first.model, gpus=first.gpus, layout=first.layout, train_tokens=first.train_tokens,
                      pue=pue, results=results, notes=notes, elapsed_s=time.perf_counter() - t0)


def _compact(v: float) -> str:
    """``v`` in three significant figures with k / M / B, for money and hour columns."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k"), (1.0, "")):
        if abs(v) >= scale * 0.9995:  # 999,600 reads 1.00M, not 1.00e+03k
            return f"{v / scale:#.3g}".rstrip(".") + suffix
    return f"{v:.3g}"


def _short(v: float) -> str:
    """Three decimals for seconds and days of ordinary size, three significant figures below
    0.1 (a tiny model's step on a GPU is a fraction of a millisecond)."""
    return f"{v:,.3f}" if v >= 0.1 else f"{v:.3g}"


def _band(d: dict | None, fmt, missing: str) -> tuple[str, str]:
    if d is None:
        return missing, ""
    return fmt(d["p50"]), f"{fmt(d['p5'])}-{fmt(d['p95'])}"


def format_comparison(c: Comparison) -> str:
    """The comparison as a table: one column per profile, one row per quantity."""
    layout = " ".join(f"{k}={c.layout[k]}" for k in ("dp", "tp", "pp", "cp", "micro_batch_size",
                                                     "global_batch_size", "recompute", "sharding"))
    base = c.results[0].hardware
    rows = [("evidence", [r.tier for r in c.results]),
            ("step p50 (s)", [_short(r.step_time_s["p50"]) for r in c.results]),
            ("step p5-p95 (s)", [f"{_short(r.step_time_s['p5'])}-{_short(r.step_time_s['p95'])}" for r in c.results]),
            (f"speed-up vs {base}", [f"{r.speedup:.2f}x" for r in c.results]),
            ("tokens/s", [f"{r.tokens_per_s:,.0f}" for r in c.results]),
            ("MFU", [f"{r.mfu:.1%}" for r in c.results]),
            ("memory/GPU (GiB)", [f"{r.memory_gib:.1f} of {r.capacity_gib:.0f}" for r in c.results]),
            ("fits", ["yes" if r.fits else "NO" for r in c.results]),
            ("price ($/GPU-h)", ["none" if r.price_per_gpu_hour is None else f"{r.price_per_gpu_hour:.2f}"
                                 for r in c.results]),
            ("power (W)", ["none" if r.power_w is None else f"{r.power_w:.0f}" for r in c.results])]
    for label, unit, attr, fmt, missing in (
            ("train", "days", "time_to_train_days", lambda v: f"{v:,.1f}" if v >= 10 else _short(v), ""),
            ("GPU-hours", "", "gpu_hours", _compact, ""),
            ("cost", "USD", "cost_usd", lambda v: f"${_compact(v)}", "no price"),
            ("energy", "MWh", "energy_mwh", lambda v: f"{v:,.0f}" if v >= 100 else f"{v:.3g}", "no power_w")):
        cells = [_band(getattr(r, attr), fmt, missing) for r in c.results]
        suffix = f" ({unit})" if unit else ""
        rows += [(f"{label} p50{suffix}", [p50 for p50, _ in cells]), (f"{label} p5-p95", [b for _, b in cells])]
    width = max(len(label) for label, _ in rows) + 2
    cols = [max(len(r.hardware), *(len(cells[i]) for _, cells in rows)) + 2 for i, r in enumerate(c.results)]
    lines = [f"{c.model} on {c.gpus} GPUs   {layout}   train {c.train_tokens:.3g} tokens", "",
             " " * width + "".join(r.hardware.ljust(w) for r, w in zip(c.results, cols)).rstrip()]
    lines += [label.ljust(width) + "".join(cell.ljust(w) for cell, w in zip(cells, cols)).rstrip()
              for label, cells in rows]
    lines += [""] + [f"note  {n}" for n in c.notes] + [f"({c.elapsed_s:.1f} s)"]
    return "\n".join(lines)


def comparison_figure(c: Comparison):
    """The comparison as one figure (a :class:`~matplotlib.figure.Figure`).

    Three panels: the step-time CDFs of every profile; the days to train; the cost (bars
    at the median, whiskers over p5-p95; profiles without a price get no bar). Profiles
    whose job does not fit in memory are hatched.
    """
    from matplotlib.ticker import FuncFormatter

    labels = [r.hardware + ("" if r.fits else "\n(does not fit)") for r in c.results]
    colors = [f"C{i}" for i in range(len(c.results))]
    fig, (cdf, days, cost) = new_figure(1, 3, figsize=(15, 4.4), gridspec_kw={"width_ratios": [1.4, 1, 1]})
    for r, color in zip(c.results, colors):
        cdf.plot(r.cdf["t_s"], r.cdf["p"], color=color, ls="-" if r.fits else "--",
                 label=f"{r.hardware} ({r.tier}{'' if r.fits else ', does not fit'})")
    medians = [r.step_time_s["p50"] for r in c.results]
    if max(medians) > 10 * min(medians):  # on a linear axis the fast profiles' CDFs collapse onto a line
        cdf.set_xscale("log")
    cdf.set(xlabel="step time (s)", ylabel="P(step <= t)", title=f"{c.model} on {c.gpus} GPUs: step time")
    cdf.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    for ax, attr, title, ylabel in ((days, "time_to_train_days", "time to train",
                                     f"days for {c.train_tokens:.3g} tokens"),
                                    (cost, "cost_usd", "cost", "USD (indicative prices)")):
        x = range(len(c.results))
        bands = [getattr(r, attr) for r in c.results]
        mid = [b["p50"] if b else 0.0 for b in bands]
        err = [[b["p50"] - b["p5"] if b else 0.0 for b in bands], [b["p95"] - b["p50"] if b else 0.0 for b in bands]]
        bars = ax.bar(x, mid, color=colors, yerr=err, capsize=4)
        for bar, r, b in zip(bars, c.results, bands):
            if not r.fits:
                bar.set_hatch("//")
            if b is None:
                ax.annotate("no price", (bar.get_x() + bar.get_width() / 2, 0), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(x), labels, fontsize=7, rotation=40, ha="right", rotation_mode="anchor")  # long profile names
        ax.set(ylabel=ylabel, title=f"{title}: median, p5-p95 band")
    cost.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"${_compact(v)}" if v else "0"))
    fig.tight_layout()
    return fig


def plot_comparison(c: Comparison, path) -> Path:
    """:func:`comparison_figure` written to the PNG ``path``: to a temporary name beside it,
    then renamed, so a reader never sees a half-written PNG.

    Returns
    -------
    Path
        ``path``.
    """
    return save_figure(comparison_figure(c), path)

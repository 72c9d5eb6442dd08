"""Text rendering of the analyses' results: the tables the ``prism`` verbs print.

One ``format_*`` per result type of :mod:`predictor.analyses`; each returns the text and
prints nothing (the command line prints it, :mod:`predictor.app.cli`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for the annotations only: a verb imports the analysis it runs, not all five
    from predictor.analyses.compare import Comparison
    from predictor.analyses.predict import Prediction
    from predictor.analyses.search import SearchResult
    from predictor.analyses.validate import PublishedValidation, Validation
    from predictor.analyses.variability import VariabilityReport


def _percent(level: float) -> str:
    """A probability as a percentage with the digits it needs: 0.995 is 99.5%, never 100%, and
    1/3 is 33.3% (within 0.05 points)."""
    for digits in range(0, 9):
        text = f"{level * 100:.{digits}f}"
        if 0 < float(text) < 100 and abs(float(text) - level * 100) <= 0.05:
            return text + "%"
    return f"{level * 100:g}%"


def _op_shares(ops: list[dict], top: int) -> str:
    """The ops above the draws' noise (:func:`~predictor.analyses.variability.ops_above_noise`),
    each as a share of the whole step-time variance."""
    from predictor.analyses.variability import ops_above_noise
    shown, noise = ops_above_noise(ops, top)
    if not shown:
        return (f"none above the draws' noise (the ops' own spread, held one at a time, moves the variance by "
                f"{noise:.2%} or less)")
    return "  ".join(f"{o['name']} {o['variance_drop']:.1%}" for o in shown) + \
        f"   (of the whole variance; noise {noise:.2%})"


def format_prediction(p: Prediction) -> str:
    """The prediction as ``prism predict`` prints it."""
    s = p.step_time_s
    lines = [
        f"{p.model} on {p.gpus} x {p.hardware}   "
        + " ".join(f"{k}={v}" for k, v in p.layout.items()),
        "",
        "step time (s)   " + "  ".join(f"{k} {_short(v)}" for k, v in s.items() if k.startswith("p") or k == "mean")
        + f"   (the hardware's variability: p95/p50 {s['jitter_p95_over_p50']:.3f})",
        f"one run's steps p10 {_short(p.one_run_s['p10'])}  p50 {_short(p.one_run_s['p50'])}  p90 "
        f"{_short(p.one_run_s['p90'])}   (what its log shows: the step-to-step part; the line above adds what a "
        f"run draws once, its slowest GPUs and its kernels' speed)",
        format_predictive(p.predictive),
        f"throughput      {_whole(p.tokens_per_s)} tokens/s   MFU {p.mfu:.1%}   (at the run's mean step, p50 "
        f"{_short(p.train_step_s)} s, as the time to train and cost; MFU of the GEMMs' precision's peak)",
        f"memory / GPU    {p.memory_gib['total']:.1f} GiB of {p.memory_gib['capacity']:.4g} (stage "
        f"{p.memory_gib['stage']}: weights {p.memory_gib['weights']:.1f}, grads {p.memory_gib['gradients']:.1f}, "
        f"optimizer {p.memory_gib['optimizer']:.1f}, activations {p.memory_gib['activations']:.1f}, "
        f"workspace {p.memory_gib['workspace']:.1f})"
        + ("" if p.fits else "   DOES NOT FIT"),
        f"critical path   compute {_short(p.breakdown_s['compute'])} s, exposed communication "
        f"{_short(p.breakdown_s['exposed_communication'])} s, bubble {_short(p.breakdown_s['bubble'])} s (the last "
        f"rank's idle time: fill, drain and waits on slower stages), host-bound "
        f"{_short(p.breakdown_s['host_bound'])} s (framework time the device waits for)",
        f"train {p.train_tokens:.3g} tokens   {duration_band(p.time_to_train_days)}, "
        f"{_whole(p.gpu_hours)} GPU-hours"
        + (f", ${_whole(p.cost_usd['p50'])} (band ${_whole(p.cost_usd['p5'])}-{_whole(p.cost_usd['p95'])})"
           if p.cost_usd else ", no price in the hardware profile")
        + ("   (the run's mean step, the doubt about the median step in it)" if p.predictive["learned_from"] else ""),
    ]
    if p.prob_below:
        lines.append(f"P(step <= {p.prob_below['t_s']:g} s) = {p.prob_below['p']:.3f}   (the within-run spread of the "
                     f"step time; confidence= adds the doubt about its median)")
    if p.confidence:
        c = p.confidence
        lines.append(f"with {_percent(c['level'])} confidence   step <= {_short(c['step_time_s'])} s, "
                     f"train in <= {duration(c['time_to_train_days'])} (variability and predictive uncertainty; "
                     f"no failures: see prism variability)")
    lines.append(f"evidence        {p.tier}")
    lines.append("rests on        " + "; ".join(f"{src}: {', '.join(sorted(ops))}" for src, ops in p.basis.items()))
    lines.append("variability     " + format_variability_source(p.hardware, p.variability_source))
    if p.calibration:
        c = p.calibration
        lines.append(f"calibrated      on {c['layouts']} measured training layouts: compute "
                     f"x{c['compute_scale']:.2f}, +{c['op_overhead_us']:.0f} us per op, "
                     f"+{c['tp_overhead_us']:.0f} us per op under tp (prism calibrate)")
    lines += [f"note            {n}" for n in p.notes]
    return "\n".join(lines)


def format_variability_source(hardware: str, v: dict) -> str:
    """Where a prediction's variability sigmas come from, as one line."""
    comps = {name: c for name, c in v.items() if name != "source"}
    if v["source"] == "cited":
        return f"cited in conf/hardware/{hardware}.yaml: " + ", ".join(f"{k} {c['sigma']:.3g}"
                                                                          for k, c in comps.items())
    parts = []
    for name, c in comps.items():
        if c["source"] == "cited":
            where = f"cited in conf/hardware/{hardware}.yaml"
        elif c["shapes"]:
            lo, hi = c["interval90"]
            where = f"{c['shapes']} shapes, {c['repeats']} repeats, 90% {lo:.3g}-{hi:.3g}"
        else:
            where = c["basis"]
        parts.append(f"{name} {c['sigma']:.3g} ({where})")
    return "measured (variability.json beside the models): " + ", ".join(parts)


def format_predictive(predictive: dict, aside: str = "") -> str:
    """The predictive uncertainty of the run's median step: one line (``aside`` at its end),
    and one more saying what runs like this one measured against PRISM, where the model
    keeps its runs."""
    if not predictive["learned_from"]:
        return "median step     no predictive-uncertainty model (models/doubt): the doubt is not stated" + aside
    iv = predictive["interval_s"]
    far = predictive["extrapolating"]
    line = ("median step     " + f"p50 {_short(predictive['median_step_s']['p50'])}  "
            + "  ".join(f"{k} {_short(lo)}-{_short(hi)}" for k, (lo, hi) in iv.items())
            + "   (predictive uncertainty"
            + (f"; extrapolating on {', '.join(far)}, as the sources it was calibrated on did when left out)"
               if far else ")") + aside)
    alike = predictive.get("alike")
    return line + ("\n" + format_alike(alike) if alike else "")


def format_alike(alike: dict) -> str:
    """What the median step's band rests on, in words: the runs like this one and how far
    their measured steps lay from PRISM's median."""
    from predictor.engine.doubt import alike_words  # numpy and the models: not for --help
    return f"band rests on   {alike_words(alike)} (their 5th to 95th percentile, each source weighing the same)"


def compact_number(v: float) -> str:
    """``v`` in three significant figures with k / M / B / T, for money, hour and energy
    columns (and the cost axis of :func:`predictor.app.plots.comparison_figure`)."""
    if abs(v) >= 999.5e12:  # past the largest suffix: 1.04e+16, not 1.04e+04T
        return f"{v:.3g}"
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"), (1.0, "")):
        if abs(v) >= scale * 0.9995:  # 999,600 reads 1.00M, not 1.00e+03k
            return f"{v / scale:#.3g}".rstrip(".") + suffix
    return f"{v:.3g}"


#: Units of a time given in days, largest first: a time reads in the largest that is at least one.
_DAY_UNITS = (("days", 1.0), ("hours", 1 / 24), ("minutes", 1 / 1440), ("s", 1 / 86400))


def _day_unit(days: float) -> tuple[str, float]:
    return next(((name, size) for name, size in _DAY_UNITS if days >= size), _DAY_UNITS[-1])


def duration(days: float) -> str:
    """A time given in days, in the unit that reads best: "20.1 days", "9.6 hours", "42 s"
    (a job on 65,536 GPUs trains in hours, which "0.0 days" hid)."""
    name, size = _day_unit(days)
    return f"{_short(days / size, 1)} {name}"


def duration_band(d: dict) -> str:
    """The p50 of a time in days and its p5-p95 band, all in the p50's unit."""
    name, size = _day_unit(d["p50"])
    return (f"{_short(d['p50'] / size, 1)} {name} (90% band {_short(d['p5'] / size, 1)}-"
            f"{_short(d['p95'] / size, 1)})")


def _short(v: float, decimals: int = 3) -> str:
    """``decimals`` decimals for seconds and days of ordinary size, three significant figures
    below 0.1 (a tiny model's step on a GPU is a fraction of a millisecond, one token
    trains in microseconds)."""
    return f"{v:,.{decimals}f}" if v >= 0.1 else f"{v:.3g}"


def _whole(v: float) -> str:
    """A count or sum in whole units with thousands separators, three significant figures
    below 100 (a million tokens on 64 A100s take 0.301 GPU-hours, not 0)."""
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _band(d: dict | None, fmt, missing: str) -> tuple[str, str]:
    if d is None:
        return missing, ""
    return fmt(d["p50"]), f"{fmt(d['p5'])}-{fmt(d['p95'])}"


def format_comparison(c: Comparison) -> str:
    """The comparison as a table: one column per profile, one row per quantity."""
    layout = " ".join(f"{k}={v}" for k, v in c.layout.items())
    base = c.results[0].hardware
    rows = [("evidence", [r.tier for r in c.results]),
            ("median step p50 (s)", [_short(r.median_step_s) for r in c.results]),
            ("median step 80% (s)", [f"{_short(lo)}-{_short(hi)}" for lo, hi in
                                     (r.median_step_80_s for r in c.results)]),
            ("runs like this vs PRISM", [f"{r.alike['off_by'][0]:+.0%} to {r.alike['off_by'][1]:+.0%} "
                                         f"({r.alike['sources']} sources)" if r.alike else "none"
                                         for r in c.results]),
            ("step p50 (s)", [_short(r.step_time_s["p50"]) for r in c.results]),
            ("step p5-p95 (hardware)", [f"{_short(r.step_time_s['p5'])}-{_short(r.step_time_s['p95'])}"
                                      for r in c.results]),
            (f"speed-up vs {base}", [f"{r.speedup:.2f}x" if r.speedup >= 0.1 else f"{r.speedup:.3g}x"
                                     for r in c.results]),  # a CPU beside a B200: 0.000114x, not 0.00x
            ("tokens/s", [_whole(r.tokens_per_s) for r in c.results]),
            ("MFU", [f"{r.mfu:.1%}" for r in c.results]),
            ("memory/GPU (GiB)", [f"{r.memory_gib:.1f} of {r.capacity_gib:.0f}" for r in c.results]),
            ("fits", ["yes" if r.fits else "NO" for r in c.results]),
            ("price ($/GPU-h)", ["none" if r.price_per_gpu_hour is None else f"{r.price_per_gpu_hour:.2f}"
                                 for r in c.results]),
            ("power (W)", ["none" if r.power_w is None else f"{r.power_w:.0f}" for r in c.results])]
    for label, unit, attr, fmt, missing in (
            ("train", "days", "time_to_train_days", lambda v: f"{v:,.1f}" if v >= 10 else _short(v), ""),
            ("GPU-hours", "", "gpu_hours", compact_number, ""),
            ("cost", "USD", "cost_usd", lambda v: f"${compact_number(v)}", "no price"),
            ("energy", "MWh", "energy_mwh", compact_number, "no power_w")):
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


def format_variability(r: VariabilityReport) -> str:
    """The report as a table."""
    s = r.step_time_s
    thresholds = list(r.scales[0]["p_slowdown"])
    lines = [f"{r.model} on {r.gpus} x {r.hardware}   " + " ".join(f"{k}={v}" for k, v in r.layout.items()),
             f"step (s)        nominal {_short(r.nominal_s)} (every component at its median)   "
             + "  ".join(f"{k} {_short(s[k])}" for k in ("p5", "p50", "p95", "mean"))
             + "   (the hardware's variability alone)",
             format_predictive(r.predictive, "  (beside, not in, this analysis)"),
             *([f"memory / GPU    {r.memory_gib['total']:.1f} GiB of {r.memory_gib['capacity']:.4g}"
                + ("" if r.fits else "   DOES NOT FIT: the job cannot run as laid out")] if r.memory_gib else []),
             "", "slowdown vs scale: P(step >= (1+x) nominal), tp/pp/cp and micro-batches per replica fixed"]
    head = ["gpus", "dp", "nominal", "p50", "p95", *(f"P(>={x:>3})" for x in thresholds)]
    rows = [[f"{row['gpus']:,}", f"{row['dp']:,}", _short(row["nominal_s"]), _short(row["p50_s"]), _short(row["p95_s"]),
             *(f"{p:.3f}" for p in row["p_slowdown"].values())] for row in r.scales]
    lines += _right_aligned([head, *rows], [8, 6, 8, 8, 8] + [9] * len(thresholds))
    lines += ["", "share of step-time variance (hold one at its median; drop in variance, normalised)",
              "  components  " + "  ".join(f"{c['name']} {c['share']:.0%}" for c in r.attribution["components"]),
              "  ops         " + _op_shares(r.attribution["ops"], r.settings["top_ops"])]
    lines += ["", f"{r.settings['slow_nodes']} slow nodes (x{r.settings['slow_factor']} compute): "
              "median step per placement"]
    for p in r.placements:
        lines.append(f"  {p['placement']:<38} p50 {_short(p['p50_s'])}  p95 {_short(p['p95_s'])}  "
                     f"x{p['vs_no_slow_nodes']:.3f}   slow GPUs per stage {p['slow_gpus_per_stage']}")
    lines.append(f"  worst / best placement: {r.placement_spread:.3f}   (placements with the same slow GPUs per stage "
                 f"coincide: the dp gradient reduction makes every replica wait for the slowest)")
    t = r.time_to_train
    if t["days"] is None:  # failures stretch it past any use (analyses.variability.NO_PROGRESS): the note says why
        lines += ["", f"train {t['train_tokens']:.3g} tokens with failures and restarts: does not finish "
                  f"(productive {duration(t['productive_days']['p50'])}; see the note)"]
    else:
        lines += ["", f"train {t['train_tokens']:.3g} tokens with failures and restarts: {duration_band(t['days'])}, "
                  f"productive {duration(t['productive_days']['p50'])}, "
                  f"{_whole(t['interruptions']['p50'])} interruptions, goodput {t['goodput']['p50']:.1%}"]
    lines += [f"note  {n}" for n in r.notes] + [f"({r.elapsed_s:.1f} s)"]
    return "\n".join(lines)


def _right_aligned(rows: list[list[str]], least: list[int]) -> list[str]:
    """``rows`` of cells, the header first, as lines of right-aligned columns one space
    apart, each at least ``least`` wide and as wide as its widest cell: 16,777,216 GPUs or
    a step of 55,408,936,533 s runs into no other column."""
    widths = [max(w, *(len(row[i]) for row in rows)) for i, w in enumerate(least)]
    return [" ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows]


def _layout_table(rows: list[dict], rank_by: str, ep: bool) -> list[str]:
    """Search layouts as lines of columns, a header first, each column as wide as its widest
    cell (a dp of 8,388,608 ran into tp); screened figures are marked; ``ep``: with an ep
    column (a MoE model's layouts differ by ep alone: rows would repeat)."""
    stat = [] if rank_by in ("p50", "p95") else [f"{rank_by}_s"]
    times = ["p50_s", "p95_s", *stat, "risk"]
    head = ["rank", "dp", "tp", "pp", "cp", *(["ep"] if ep else []), "vpp", "mbs", "recompute", "sharding", *times,
            "mem_GiB", "tokens/s", "MFU", "median step (s)", "median 80% (s)"]
    left = {"recompute", "sharding"}  # text columns; the rest are numbers, right-aligned
    table = [head]
    for r in rows:
        table.append([str(r["rank"]), str(r["dp"]), str(r["tp"]), str(r["pp"]), str(r["cp"]),
                      *([str(r["ep"])] if ep else []), str(r["vpp"]), str(r["mbs"]), r["recompute"], r["sharding"],
                      *(f"{r[c]:.3f}" for c in times), f"{r['memory_gib']:.1f}", f"{r['tokens_per_s']:,.0f}",
                      f"{r['mfu']:.1%}",
                      f"{r['median_step_s']:.3f}" if r["composed"] and r.get("median_step_s") else "(screen)",
                      f"{r['median_step_80_s'][0]:.3f}-{r['median_step_80_s'][1]:.3f}" if r["composed"]
                      else "(screen)"])
    widths = [max(len(row[k]) for row in table) for k in range(len(head))]
    return [" ".join(cell.ljust(w) if name in left else cell.rjust(w)
                     for cell, w, name in zip(row, widths, head)).rstrip() for row in table]


def format_search(r: SearchResult) -> str:
    """The counts, the top layouts and both Pareto fronts as tables."""
    c = r.counts
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(c["invalid_by_reason"].items()))
    lines = [f"{r.model} on {r.gpus} x {r.hardware}   global batch {r.global_batch_size} x {r.seq_length} tokens   "
             f"ranked by {r.rank_by}",
             f"layouts   {c['enumerated']} enumerated, {c['invalid']} invalid{f' ({reasons})' if reasons else ''}, "
             f"{c['do_not_fit']} do not fit in memory, {c['ranked']} ranked   ({r.seconds:.1f} s)",
             "", f"top {min(r.top, len(r.layouts))} by {r.rank_by} (composed with {r.draws['composed']} draws; "
                 f"the rest screened with {r.draws['screen']}; p50/p95: the step, the hardware's variability, ranked "
                 f"by; median step: prism predict's, with its predictive uncertainty; tokens/s and MFU: prism "
                 f"predict's, at the run's mean step, where composed)"]
    ep = any(layout["ep"] > 1 for layout in r.layouts)
    lines += _layout_table(r.layouts[:r.top], r.rank_by, ep)
    lines += ["", f"Pareto front: {r.rank_by} vs memory per GPU ({len(r.front_memory)} layouts)"]
    lines += _layout_table([r.layouts[i] for i in r.front_memory], r.rank_by, ep)
    lines += ["", f"Pareto front: p50 vs risk = p95/p50 ({len(r.front_risk)} layouts)"]
    lines += _layout_table([r.layouts[i] for i in r.front_risk], r.rank_by, ep)
    lines.append(f"\nevidence  {r.tier}")
    return "\n".join(lines)


def format_validation(v: Validation) -> str:
    """The scores as a table, one row per layout, and their summary."""
    t = v.table()
    shown = t[["layout_id", "steps", "measured_p50_s", "predicted_p50_s", "median_ape", "p95_ape", "ks",
               "coverage_80", "p95_p50_meas", "p95_p50_pred", "median_in_80"]].copy()
    for c in ("p95_p50_meas", "p95_p50_pred"):
        shown[c] = shown[c].map(lambda x: f"{x:.3f}")
    for c in ("measured_p50_s", "predicted_p50_s"):
        shown[c] = (shown[c] * 1e3).map(lambda x: f"{x:.1f}")
    shown = shown.rename(columns={"measured_p50_s": "meas p50 ms", "predicted_p50_s": "pred p50 ms"})
    for c, form in (("median_ape", "{:.1%}"), ("p95_ape", "{:.1%}"), ("coverage_80", "{:.1%}"), ("ks", "{:.3f}")):
        shown[c] = shown[c].map(lambda x, form=form: "n/a" if x is None or x != x else form.format(x))
    s = v.summary()

    def shown_median(key: str, form: str) -> str:
        return "n/a (too few steps)" if s[key] is None else form.format(s[key])
    return (shown.to_string(index=False) + "\n\n"
            f"{s['layouts']} layouts: median abs. error of the median {s['median_ape_median']:.1%} "
            f"(worst {s['median_ape_worst']:.1%}), of p95 {s['p95_ape_median']:.1%}; median KS "
            f"{shown_median('ks_median', '{:.3f}')}; median 80% coverage "
            f"{shown_median('coverage_80_median', '{:.1%}')}; within-run spread "
            f"(p95/p50) within 5% of the measured in {s['spread_within_5pct']} of {s['layouts']}"
            + (f"; the 80% predictive interval holds the measured median in {s['median_in_80_share']:.0%}"
               if s["median_in_80_share"] is not None else "")
            + "".join(f"\nnote  {n}" for n in v.notes))


def format_published_validation(v: PublishedValidation) -> str:
    """The published-runs check: per group the runs, the median error and the coverage
    and width of the predictive intervals; the reliability of central intervals."""
    shown = v.summary.copy()
    for c in ("median_ape", "cover50", "cover80", "cover90", "width90"):
        shown[c] = shown[c].map(lambda x: f"{x:.1%}")
    rel = "  ".join(f"{n:.0%}->{o:.0%}" for n, o in zip(v.reliability.nominal, v.reliability.observed))
    skipped = ", ".join(f"{k} {n}" for k, n in v.skipped.items()) or "none"
    return (shown.rename(columns={"width90": "width90 (of p50)"}).to_string(index=False)
            + f"\n\nreliability (nominal -> observed coverage of central intervals): {rel}"
            + f"\nnot predicted: {skipped}")

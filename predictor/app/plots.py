"""The verbs' figures: one ``*_figure`` per result type of :mod:`predictor.analyses`,
where a figure goes (``plot=``, :func:`plot_path`) and how it is saved (atomically,
:func:`save_figure`).

Figures are drawn without pyplot (:func:`new_figure`), so a notebook's backend is left
alone and a figure shows there as the value of a cell.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from predictor.app.render import compact_number
from predictor.core.errors import PrismError
from predictor.core.files import checked_path, writable, write_atomically
from predictor.core.layout import AXES

if TYPE_CHECKING:  # for the annotations only: a verb imports the analysis it runs, not all five
    from predictor.analyses.compare import Comparison
    from predictor.analyses.predict import Prediction
    from predictor.analyses.search import SearchResult
    from predictor.analyses.validate import PublishedValidation, Validation
    from predictor.analyses.variability import VariabilityReport


def new_figure(nrows: int = 1, ncols: int = 1, figsize=None, **subplots):
    """A figure and its axes (``Figure.subplots``), drawn without pyplot.

    Drawing off-screen through pyplot needs ``matplotlib.use("Agg")``, which switches the
    caller's backend too (a notebook's inline figures stop showing); a bare
    :class:`~matplotlib.figure.Figure` leaves the backend alone, saves to a file
    (:func:`save_figure`) and shows in a notebook as the value of a cell.
    """
    from matplotlib.figure import Figure
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **subplots)


def save_figure(fig, path) -> Path:
    """Write ``fig`` to ``path`` (PNG unless the suffix says otherwise) through a temporary
    file and a rename, so an interrupted save never leaves a truncated image; closes ``fig``."""
    import matplotlib.pyplot as plt
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return write_atomically(path, lambda tmp: fig.savefig(tmp, format=path.suffix.lstrip(".") or "png", dpi=110))
    finally:
        plt.close(fig)


def plot_path(value, key: str = "plot") -> Path | None:
    """``plot=`` (or ``key=``) as the PNG to write (``.png`` added to a new name without a
    suffix; the verb's ``plot`` line names the file), checked writable, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not str(value).strip():
        raise PrismError(f"{key}={value}: a file to write the figure to, e.g. {key}=step.png", field=key)
    path = checked_path(key, str(value))
    if path.is_dir() or str(value).endswith(("/", "\\")):  # not a file beside it, FOLDER.png
        raise PrismError(f"{key}={value}: names a folder; give a file in it, e.g. {key}={path / 'figure.png'}",
                         field=key)
    if path.name.lower() == ".png":  # Path reads it as a hidden file with no suffix: ".png.png"
        raise PrismError(f"{key}={value}: a suffix with no name; give the file a name, e.g. "
                         f"{key}={path.with_name('step.png')}", field=key)
    if not path.suffix and not path.exists():  # an existing name (plot=/dev/null) is no name to add to
        path = path.with_suffix(".png")
    elif path.suffix.lower() != ".png":
        raise PrismError(f"{key}={value}: the figure is a PNG; give a path ending in .png, e.g. {key}=step.png",
                         field=key)
    _matplotlib_loads()  # before any work, as the path is checked: not after the results, lost with the figure
    return writable(key, path)


def _matplotlib_loads() -> None:
    """Import matplotlib, or one error naming the environment setting it refuses (an unknown
    ``MPLBACKEND`` fails its import)."""
    try:
        import matplotlib  # noqa: F401
    except ValueError as exc:
        raise PrismError(f"MPLBACKEND={os.environ.get('MPLBACKEND')}: matplotlib refuses it ({str(exc)[:80]}...); "
                         f"unset it or set MPLBACKEND=agg to draw figures", field="MPLBACKEND") from None


def default_plot_path(beside, suffix: str, key: str) -> Path:
    """Where a verb draws its figure when ``key=`` is not given: ``beside`` (its input) with
    ``suffix``, checked as a given ``key=`` is (:func:`plot_path`), before any work: a folder
    that takes no file was found out only after the scores, which were lost with the figure."""
    try:
        return plot_path(Path(beside).with_suffix(suffix), key)
    except PrismError as exc:
        raise PrismError(f"{exc} ({key}= was not given, and the figure goes beside {beside} by default: give "
                         f"{key}=PATH.png)", field=key) from None


def prediction_figure(p: Prediction):
    """One prediction as a figure: the step-time CDF with its p5/p50/p95 (and the target,
    if any), and the median critical path split into compute, exposed communication and
    bubble."""
    fig, (left, right) = new_figure(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [2, 1]})
    left.plot(p.cdf["t_s"], p.cdf["p"], color="tab:blue")
    for key, style in (("p5", ":"), ("p50", "-"), ("p95", ":")):
        left.axvline(p.step_time_s[key], color="tab:blue", linestyle=style, alpha=0.6)
    if p.prob_below:
        left.axvline(p.prob_below["t_s"], color="tab:red", label=f"target: P = {p.prob_below['p']:.2f}")
        left.legend()
    left.set(xlabel="step time (s)", ylabel="P(step <= t)",
             title=f"{p.model} on {p.gpus} x {p.hardware} ({p.tier})")
    parts = list(p.breakdown_s)
    right.barh(parts[::-1], [p.breakdown_s[k] for k in parts][::-1], color="tab:orange")
    right.set(xlabel="seconds (median, slowest stage)", title="critical path")
    fig.tight_layout()
    return fig


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
                                    (cost, "cost_usd", "cost", "USD (hardware.price_per_gpu_hour)")):
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
        # long profile names, slanted
        ax.set_xticks(list(x), labels, fontsize=7, rotation=40, ha="right", rotation_mode="anchor")
        ax.set(ylabel=ylabel, title=f"{title}: median, p5-p95 band")
    cost.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"${compact_number(v)}" if v else "0"))
    fig.tight_layout()
    return fig


def search_figure(r: SearchResult):
    """Every ranked layout as a figure: ``rank_by`` against memory per GPU, and p50
    against risk, each with its Pareto front."""
    stat = np.array([x[f"{r.rank_by}_s"] for x in r.layouts])
    memory = np.array([x["memory_gib"] for x in r.layouts])
    p50 = np.array([x["p50_s"] for x in r.layouts])
    risk = np.array([x["risk"] for x in r.layouts])
    fig, axes = new_figure(1, 2, figsize=(11, 4.2))
    for ax, x, y, front, xlabel, ylabel in (
            (axes[0], memory, stat, r.front_memory, "memory per GPU (GiB)", f"step time {r.rank_by} (s)"),
            (axes[1], p50, risk, r.front_risk, "step time p50 (s)", "risk p95 / p50")):
        ax.scatter(x, y, s=5, color="0.7", label=f"{len(r.layouts)} layouts")
        ax.plot(x[front], y[front], "o-", color="C3", ms=4, label="Pareto front")
        ax.scatter(x[:1], y[:1], marker="*", s=120, color="C0", zorder=3, label=f"best by {r.rank_by}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        (ax.set_yscale if ax is axes[0] else ax.set_xscale)("log")  # step times span an order of magnitude
        ax.legend(fontsize=8)
    fig.suptitle(f"{r.model} on {r.gpus} x {r.hardware}: {r.counts['ranked']} layouts that fit")
    fig.tight_layout()
    return fig


def variability_figure(r: VariabilityReport):
    """The report as one figure of four panels: the step-time CDF against the nominal step
    and its slowdown thresholds; P(slowdown >= x) versus GPU count; the shares of the
    step-time variance (the ``top_ops`` op residuals, then the components); the median step
    with the slow nodes in each placement, relative to none."""
    fig, ((cdf, scale), (shares, placed)) = new_figure(2, 2, figsize=(12, 8))
    fig.suptitle(f"{r.model} on {r.gpus} x {r.hardware}   "
                 + " ".join(f"{k}={r.layout[k]}" for k in AXES))

    cdf.plot(r.cdf["t_s"], r.cdf["p"], label=f"{r.gpus} GPUs")
    for x in [0.0] + list(r.settings["thresholds"]):
        cdf.axvline(r.nominal_s * (1 + x), color="grey", ls=":" if x else "--", lw=1)
    cdf.set(xlabel="step time (s); dashed: nominal, dotted: nominal x (1 + x)", ylabel="P(step <= t)",
            title="step-time distribution")
    cdf.legend(fontsize=8)

    gpus = [row["gpus"] for row in r.scales]
    for x in r.scales[0]["p_slowdown"]:
        scale.plot(gpus, [row["p_slowdown"][x] for row in r.scales], marker="o", label=f"slowdown >= {x}")
    scale.axvline(r.gpus, color="grey", ls="--", lw=1, label=f"this job: {r.gpus} GPUs")
    scale.set(xscale="log", xlabel="GPUs (tp, pp, cp and micro-batches per replica fixed)", ylabel="probability",
              ylim=(-0.02, 1.02), title="P(step >= (1 + x) nominal) versus scale")
    scale.legend(fontsize=8)

    from predictor.analyses.variability import ops_above_noise
    ops, comps = ops_above_noise(r.attribution["ops"], r.settings["top_ops"])[0], r.attribution["components"]
    names = [f"op {o['name']}" for o in ops] + [f"component {c['name']}" for c in comps]
    values = [o["variance_drop"] for o in ops] + [c["share"] for c in comps]
    colors = ["tab:blue"] * len(ops) + ["tab:orange"] * len(comps)
    shares.barh(names[::-1], values[::-1], color=colors[::-1])
    shares.tick_params(axis="y", labelsize=8)
    shares.set(xlabel="share of step-time variance, held at its median\n(components sum to 1; ops: of the whole, "
                      "above the draws' noise)",
               title="what drives the spread")

    labels = [f"{p['placement']}\n{p['slow_gpus_per_stage']}" for p in r.placements[1:]]
    slower = [100 * (p["vs_no_slow_nodes"] - 1) for p in r.placements[1:]]
    placed.barh(labels[::-1], slower[::-1], color="tab:red")
    if not labels:
        placed.text(0.5, 0.5, "no slow nodes placed (analysis.slow_nodes=0)", ha="center", transform=placed.transAxes)
    placed.tick_params(axis="y", labelsize=7)
    placed.set(xlabel="median step slower than with no slow nodes (%)",
               title=f"{r.settings['slow_nodes']} slow nodes (x{r.settings['slow_factor']}): slow GPUs per stage")
    fig.tight_layout()
    return fig


def cdf_figure(v: Validation):
    """A validation as a figure, one panel per layout: the predicted CDF (line) over the
    measured steps' ECDF (steps)."""
    n = len(v.scores)
    cols = min(4, n)
    rows = -(-n // cols)
    fig, axes = new_figure(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
    for ax, s in zip(axes.flat, v.scores):
        d, t = np.sort(v.predicted[s.layout_id]), np.sort(v.measured[s.layout_id])
        ax.plot(d * 1e3, np.linspace(0, 1, len(d)), label="predicted")
        ax.step(t * 1e3, np.arange(1, len(t) + 1) / len(t), where="post", label=f"measured ({len(t)} steps)")
        ks = "n/a" if s.ks is None else f"{s.ks:.2f}"
        ax.set_title(f"{s.layout_id}\nmedian err {s.median_ape:.1%}, KS {ks}", fontsize=8)
        ax.set_xlabel("step time (ms)")
        ax.set_ylabel("P(step <= t)")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    return fig


def reliability_figure(v: PublishedValidation):
    """A reliability diagram (nominal against observed coverage of central predictive
    intervals; on the diagonal when the intervals are true) and a PIT histogram (flat when
    the predictive distributions are calibrated; a U: too narrow; a hump: too wide)."""
    fig, (rel, pit) = new_figure(1, 2, figsize=(10, 4))
    rel.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--", label="true intervals")
    rel.plot(v.reliability.nominal, v.reliability.observed, "o-", color="C0", label=f"{len(v.runs)} runs")
    rel.set(xlabel="nominal coverage", ylabel="observed coverage", xlim=(0, 1), ylim=(0, 1),
            title="reliability of the predictive intervals")
    rel.legend(fontsize=8)
    pit.hist(v.runs.pit, bins=10, range=(0, 1), color="C1", edgecolor="white")
    pit.axhline(len(v.runs) / 10, color="0.4", ls="--", lw=1, label="calibrated")
    pit.set(xlabel="predictive CDF at the measured step (PIT)", ylabel="runs", title="PIT histogram")
    pit.legend(fontsize=8)
    fig.tight_layout()
    return fig


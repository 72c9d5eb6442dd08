"""Fit a hardware's variability sigmas from the repeats its sample store already holds.

Every timed repeat of ``prism sample`` is a row (:mod:`predictor.data.store`). A
shape's repeats spread by what the hardware does from one call to the next, which its
operator model's quantiles already hold and the composer draws call by call. What the
quantiles cannot hold is what calls *share*: the composer's per-step factors.

``temporal``  the drift of the machine's common speed (the per-step compute factor),
              from compute shapes timed in rounds (``sampling.rounds``; step 6),
``regime``    what the collective sizes of one round share (the step's communication
              regime; each repeat is already the slowest rank's time; step 7),
``spatial``   the spread between ranks: where several ranks of one run timed the same
              shape (a cluster job, :mod:`sampling.runner`), the spread of their
              per-rank medians, less what the medians' own noise adds (step 5); 0 on
              one host with one rank (no GPU-to-GPU spread to see); not fitted for
              compute rows of several hosts without rank tags (the profile's cited
              figure stays).

A store that cannot show a component (timed before rounds, imported), or whose fit of it
cannot be told from 0 (step 8), leaves it to the profile's cited figure. The spread of
one shape's repeats is no per-step factor: fitted as the temporal sigma, it put the
within-run spread of 5 of the 16 suite layouts within 5% of the measured, against 10
with the cited figures, the calls' own jitter counted twice.

Method, per component:

1. A shape group is one shape's repeats in one run (``shape_groups``: shape, topology,
   dtype; and ``run_id``): what differs between runs (another boot, another neighbour
   on the host) is not spread within one.
2. Only groups whose median is at least :data:`MIN_US` count. The CPU timer
   (``perf_counter_ns``) resolves nanoseconds, but a call from Python carries a fixed
   cost (dispatch, allocation: the fastest forward calls of samples/local-cpu take
   2.5-17 us, backward ones more) whose jitter dominates short kernels; from 200 us on it
   is a few % of the call. The fitted sigma depends on this cut (on samples/local-cpu the
   spread falls with kernel length: about 6% at 0.2-1 ms, 1% above 5 ms).
3. The repeats' own spread (what step 5 takes out of the ranks' medians) is a robust
   sigma, ``1.4826 * median |x_i - x_j| / sqrt(2)`` over every pair of
   repeats of a group, pooled over the groups, x the log latency. Pairwise differences
   need no group centre: deviations from a group's own median shrink (the MAD about the
   median of 10 normal repeats is 0.87 sigma, of 3 repeats 0.46), their differences do
   not; the median ignores the rare preempted repeat (Rousseeuw & Croux 1993, JASA
   88:1273, scale estimators from pairwise differences). The repeats' warm-up drift (the
   first repeats of a CPU shape run a few % slow) is left in: taking out its pooled
   median per repeat position did not narrow the spread (the drift is not common to
   all shapes).
4. Its 90% interval is the 5th-95th percentile over :data:`BOOTSTRAP` resamples of the
   shape groups (with replacement).
5. Spatial: per shape group of one run timed by at least two ranks, each rank's median
   log latency (its own repeats: a group of step 1 is one rank's); the robust sigma of
   the pairwise differences of those medians, as in step 3, is the between-rank spread
   s_b. A median of n repeats scatters by about sqrt(pi/2) sigma_t / sqrt(n) around the
   rank's true level, so ``spatial = sqrt(max(0, s_b^2 - (pi/2) sigma_t^2 / n))`` with step
   3's sigma and the mean repeats per rank; the interval resamples the shape groups.
6. Temporal, where the shapes were timed in rounds (``sampling.rounds``: each round's
   repeats share one timestamp): the drift of the machine's common speed, which the
   repeats of one round cannot show and each shape's quantiles hold only as independent
   jitter. Each round's median log latency less the mean over its shape group's rounds,
   averaged over every compute round of the run within :data:`DRIFT_WINDOW_S` of it, is
   the machine's speed at that moment; temporal is the spread of those speeds, times
   k/(k-1) for the k rounds' own centring, less the noise the average keeps (the
   residuals' spread about it over the entries averaged). Its interval resamples the
   shape groups. On a 2-core CPU slice's sample the speed wanders by
   several percent (docs/validation-log.md).
7. Regime, where collectives were timed round by round (repeat r of every size, then
   r + 1: :func:`sampling.collectives.blocks`, one timestamp per block): what the sizes of
   one round share. Each repeat's log latency less the mean of its op and size; per round
   (op, block, repeat) of at least :data:`MIN_SIZES` sizes, the mean of those residuals;
   regime is the spread of the round means less their own noise (the residuals' variance
   within a round over its size count). A CPU's small collectives vary several-fold from
   call to call, which their quantiles hold; the step's
   shared regime is what their rounds share (far less than the
   repeats' whole spread, which would count the calls' own spread twice).
8. A fitted sigma replaces the profile's cited figure only where the samples tell it from
   0: the sigma and the lower end of its 90% interval above 0 (a bootstrap over few groups
   can leave the fit below its own interval), over at least :data:`MIN_GROUPS` shape
   groups (rounds, for regime; one group's resamples are all alike, so its interval bounds
   nothing). A short sample often cannot: samples/h100's 7.5 s run, its gemms re-timed in
   3 rounds, fits 0.0085 (90% 0-0.0225); a fit of 0 from such a sample, used, would be a
   machine that never drifts, where the GPU profiles cite drift over days (Llama 3's
   diurnal swing). Such a component keeps the cited figure, and ``method`` names it, its
   fit and why.
"""
from __future__ import annotations

from datetime import datetime, timezone
from itertools import combinations

import numpy as np
import pandas as pd

from predictor.core.ops import OPS
from predictor.core.specs import HardwareConfig
from predictor.latency.artifacts import data_hash, shape_groups
from predictor.latency.variability_profile import COMPONENTS, MeasuredVariability, Sigma

#: Shortest group median (us) whose repeats count (module docstring, step 2).
MIN_US = 200.0
#: Fewest collective sizes a round needs to show what they share (module docstring, step 7).
MIN_SIZES = 3
#: Half-width (s) of the window whose compute rounds average into the machine's speed at
#: a moment (module docstring, step 6): a CPU slice's speed holds for a few seconds.
DRIFT_WINDOW_S = 1.0
#: Fewest repeats a group needs to show a spread.
MIN_REPEATS = 3
#: ``origin`` of the rows ``prism sample`` timed (the importers' rows are summaries: ETT's
#: and the microbenchmarks' ``repeat`` numbers rows of one shape, not timed repeats).
SAMPLED = "sampled"
#: Bootstrap resamples of the shape groups for each interval.
BOOTSTRAP = 1000
#: Fewest shape groups (rounds, for regime) a fitted sigma needs to replace the cited one
#: (module docstring, step 8).
MIN_GROUPS = 2
#: 1 / Phi^-1(3/4): the MAD of a normal is this many times smaller than its sigma.
MAD_TO_SIGMA = 1.4826

METHOD = (f"temporal: the machine's common speed over the sample, each compute round's median log latency (shape "
          f"groups of >= {MIN_US:g} us timed in >= 2 rounds) less its group's mean, averaged within "
          f"+-{DRIFT_WINDOW_S:g} s, its spread corrected for the rounds' centring and the average's noise; regime: "
          f"the spread of the mean residual of the collective sizes timed in one round (>= {MIN_SIZES} sizes) less "
          f"its noise; spatial: per-rank medians of the same shapes less their noise; 90% intervals: bootstrap "
          f"resamples of the shape groups (rounds)")


def _groups(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per repeat of ``rows``: its ``group`` (op, pass, shape, run and rank), its
    ``shape`` group (the same without the rank), ``x``, the log latency, and its
    ``timestamp`` where the rows have one."""
    parts = []
    for (op, pass_), g in rows.groupby(["op", "pass"], sort=True):
        shape = shape_groups(op, g)
        run = g["run_id"].astype(str).to_numpy() if "run_id" in g else np.zeros(len(g), str)
        rank = g["rank"].astype("Int64").astype(str).to_numpy() if "rank" in g else np.zeros(len(g), str)
        where = [f"{op}/{pass_}/{s}/{r}" for s, r in zip(shape, run)]
        parts.append(pd.DataFrame({"group": [f"{w}/{k}" for w, k in zip(where, rank)], "shape": where,
                                   "x": np.log(g["latency_us"].to_numpy()),
                                   **({"timestamp": g["timestamp"].to_numpy()} if "timestamp" in g else {})}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["group", "shape", "x"])


def _kept(frame: pd.DataFrame) -> pd.DataFrame:
    """The repeats of groups long enough and repeated enough to show a spread (steps 1-2)."""
    long = frame.groupby("group")["x"].transform("median") >= np.log(MIN_US)
    repeated = frame.groupby("group")["x"].transform("size") >= MIN_REPEATS
    return frame[long & repeated]


def _pair_differences(frame: pd.DataFrame) -> list[np.ndarray]:
    """Per group of ``frame``, |x_i - x_j| over its pairs of repeats."""
    return [np.abs(np.subtract(*np.array(list(combinations(v, 2))).T)) for v in frame.groupby("group")["x"].agg(list)]


def fit_sigma(rows: pd.DataFrame, basis: str, seed: int = 0) -> Sigma | None:
    """The robust sigma of ``rows``' repeats (module docstring), or None where no shape
    group is long enough and repeated enough."""
    frame = _kept(_groups(rows))
    if frame.empty:
        return None
    diffs = _pair_differences(frame)
    rng = np.random.default_rng(seed)
    boot = [_sigma([diffs[i] for i in rng.integers(0, len(diffs), len(diffs))]) for _ in range(BOOTSTRAP)]
    lo, hi = np.quantile(boot, [0.05, 0.95])
    return Sigma(_sigma(diffs), (float(lo), float(hi)), len(diffs), len(frame), basis)


def _sigma(diffs: list[np.ndarray]) -> float:
    """The pooled robust sigma of groups' pairwise differences (module docstring, step 3)."""
    return float(MAD_TO_SIGMA * np.median(np.concatenate(diffs)) / np.sqrt(2))


def _rounds(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per round of a shape group timed in two rounds or more: its ``group``, its
    ``run``, time ``t`` (s), its rounds ``k`` and ``r``, the round's median log latency
    less the mean over the group's rounds."""
    if "timestamp" not in rows or rows.empty:
        return pd.DataFrame(columns=["group", "run", "t", "k", "r"])
    frame = _kept(_groups(rows))
    per = frame.groupby(["group", "timestamp"], as_index=False)["x"].median()
    per["k"] = per.groupby("group")["x"].transform("size")
    per = per[per["k"] >= 2]
    per["r"] = per["x"] - per.groupby("group")["x"].transform("mean")
    per["run"] = per["group"].str.rsplit("/", n=1).str[0].str.rsplit("/", n=1).str[1]
    stamp = pd.to_datetime(per["timestamp"], utc=True)
    per["t"] = (stamp - stamp.min()).dt.total_seconds()
    return per[["group", "run", "t", "k", "r"]]


def _drift(per: pd.DataFrame, weight: np.ndarray) -> float:
    """The machine's speed spread from ``per`` (:func:`_rounds`) with each round weighted
    (a bootstrap's draw count of its group)."""
    speeds, noise, k = [], [], []
    for _, run in per.assign(w=weight).groupby("run"):
        run = run.sort_values("t")
        t, r, w = run["t"].to_numpy(), run["r"].to_numpy(), run["w"].to_numpy()
        lo, hi = np.searchsorted(t, t - DRIFT_WINDOW_S), np.searchsorted(t, t + DRIFT_WINDOW_S, side="right")
        cw, cr, cr2 = (np.concatenate([[0.0], np.cumsum(v)]) for v in (w, w * r, w * r * r))
        n = cw[hi] - cw[lo]
        ok = (n > 1) & (w > 0)
        mean = (cr[hi] - cr[lo])[ok] / n[ok]
        within = np.maximum((cr2[hi] - cr2[lo])[ok] / n[ok] - mean ** 2, 0.0)
        speeds.append(np.repeat(mean, w[ok].astype(int)))
        noise.append(np.repeat(within / n[ok], w[ok].astype(int)))
        k.append(np.repeat(run["k"].to_numpy()[ok], w[ok].astype(int)))
    speeds, noise, k = (np.concatenate(v) for v in (speeds, noise, k))
    if len(speeds) < 2:
        return 0.0
    centring = float(np.mean(k / (k - 1)))
    return float(np.sqrt(max(0.0, np.var(speeds) * centring - np.mean(noise))))


def fit_drift(rows: pd.DataFrame, seed: int = 0) -> Sigma | None:
    """The spread of the machine's common speed over the run, from compute ``rows`` timed
    in rounds (module docstring, step 6), or None where no shape was timed in two rounds."""
    per = _rounds(rows)
    if per.empty:
        return None
    groups = per["group"].unique()
    index = pd.Series(np.arange(len(groups)), index=groups)[per["group"]].to_numpy()
    rng = np.random.default_rng(seed)
    boot = [_drift(per, np.bincount(rng.integers(0, len(groups), len(groups)), minlength=len(groups))[index])
            for _ in range(BOOTSTRAP)]
    lo, hi = np.quantile(boot, [0.05, 0.95])
    return Sigma(_drift(per, np.ones(len(per))), (float(lo), float(hi)), len(groups), len(per),
                 f"the machine's common speed over the sample: compute rounds averaged within +-{DRIFT_WINDOW_S:g} s")


def fit_shared_regime(rows: pd.DataFrame, seed: int = 0) -> Sigma | None:
    """What the collective sizes timed in one round share (module docstring, step 7), from
    collective ``rows``, or None where no round holds :data:`MIN_SIZES` sizes."""
    if not {"timestamp", "repeat", "message_bytes"} <= set(rows) or rows.empty:
        return None
    x = np.log(rows["latency_us"].to_numpy())
    keys = [rows["op"], rows["message_bytes"]] + ([rows["run_id"]] if "run_id" in rows else [])
    frame = pd.DataFrame({"r": x - pd.Series(x, index=rows.index).groupby(keys).transform("mean").to_numpy(),
                          "round": (rows["op"].astype(str) + "/" + rows["timestamp"].astype(str) + "/"
                                    + rows["repeat"].astype(str)).to_numpy()})
    per = frame.groupby("round")["r"].agg(["mean", "var", "size"])
    per = per[per["size"] >= MIN_SIZES]
    if len(per) < 2:
        return None

    def shared(p):
        return float(np.sqrt(max(0.0, p["mean"].var() - (p["var"] / p["size"]).mean())))

    rng = np.random.default_rng(seed)
    boot = [shared(per.iloc[rng.integers(0, len(per), len(per))]) for _ in range(BOOTSTRAP)]
    lo, hi = np.quantile(boot, [0.05, 0.95])
    return Sigma(shared(per), (float(lo), float(hi)), len(per), int(per["size"].sum()),
                 "what the collective sizes timed in one round share")


def fit_spatial(rows: pd.DataFrame, temporal: Sigma, seed: int = 0) -> Sigma | None:
    """The spread between ranks of compute ``rows`` (module docstring, step 5), or None
    where no shape of a run was timed by two ranks."""
    frame = _kept(_groups(rows))
    ranks = frame.groupby(["shape", "group"])["x"].agg(["median", "size"]).reset_index()
    ranks = ranks[ranks.groupby("shape")["group"].transform("size") >= 2]
    if ranks.empty:
        return None
    medians = ranks.groupby("shape")["median"].agg(list)
    diffs = [np.abs(np.subtract(*np.array(list(combinations(v, 2))).T)) for v in medians]
    noise = (np.pi / 2) * temporal.sigma ** 2 / float(ranks["size"].mean())

    def spread(d):
        return float(np.sqrt(max(0.0, _sigma(d) ** 2 - noise)))

    rng = np.random.default_rng(seed)
    boot = [spread([diffs[i] for i in rng.integers(0, len(diffs), len(diffs))]) for _ in range(BOOTSTRAP)]
    lo, hi = np.quantile(boot, [0.05, 0.95])
    n_ranks = int(ranks["group"].str.rsplit("/", n=1).str[1].nunique())
    return Sigma(spread(diffs), (float(lo), float(hi)), len(diffs), len(ranks),
                 f"per-rank medians of the same shapes ({n_ranks} ranks), less the medians' own noise")


def _told_from_zero(s: Sigma) -> bool:
    """Whether the samples tell the fitted ``s`` from 0 (module docstring, step 8)."""
    return min(s.sigma, s.interval90[0]) > 0 and s.shapes >= MIN_GROUPS


def fit_variability(samples: pd.DataFrame, hw: HardwareConfig, seed: int = 0) -> MeasuredVariability | None:
    """``hw``'s temporal, spatial and regime sigmas from the repeats of ``samples`` (module
    docstring), or None where they leave none to use: no shape timed in rounds, no
    collective round, no second rank (imported rows are summaries, not timed repeats), or
    only fits they cannot tell from 0 (step 8). A component they cannot show is left out:
    the profile's cited figure stays for it, and ``method`` says so of one fitted as
    indistinguishable from 0."""
    rows = samples[(samples["hardware"] == hw.name) & (samples["latency_us"] > 0)]
    if "origin" in rows:  # imported rows' ``repeat`` numbers summary values, not timed repeats
        rows = rows[rows["origin"].fillna(SAMPLED) == SAMPLED]
    collective = rows["op"].map(lambda op: OPS[op].collective).astype(bool)
    ranked = "rank" in rows and rows.loc[~collective, "rank"].nunique() > 1
    within = fit_sigma(rows[~collective], "compute ops' repeats", seed) if ranked else None  # spatial's noise alone
    fitted = {"temporal": fit_drift(rows[~collective], seed), "regime": fit_shared_regime(rows[collective], seed),
              "spatial": fit_spatial(rows[~collective], within, seed) if within is not None else None}
    fitted = {k: s for k, s in fitted.items() if s is not None}
    sigmas = {k: s for k, s in fitted.items() if _told_from_zero(s)}
    one_rank = "rank" not in rows or rows.loc[~collective, "rank"].nunique() <= 1
    if fitted and "spatial" not in fitted and one_rank and (
            "host" not in rows or rows.loc[~collective, "host"].nunique() <= 1):
        sigmas["spatial"] = Sigma(0.0, (0.0, 0.0), 0, 0, "one host: no GPU-to-GPU spread to see")
    if not sigmas:
        return None
    cited = [f"{k} {getattr(hw.variability, COMPONENTS[k]):g} (fitted {s.sigma:.3g}, 90% {s.interval90[0]:.3g}-"
             f"{s.interval90[1]:.3g}, {s.shapes} {'rounds' if k == 'regime' else 'shape groups'})"
             for k, s in fitted.items() if k not in sigmas]
    method = METHOD + (f"; the profile's cited figure kept for {', '.join(cited)}: the samples cannot tell the fit "
                       f"from 0 (a sigma or interval reaching 0, or under {MIN_GROUPS} groups)" if cited else "")
    used = rows[["op", "pass", "latency_us"] + (["run_id"] if "run_id" in rows else [])]
    runs = sorted(map(str, rows["run_id"].dropna().unique())) if "run_id" in rows else []
    ranks = rows[["host", "rank"]].drop_duplicates() if {"host", "rank"} <= set(rows) else rows[[]].head(1)
    return MeasuredVariability(hw.name, sigmas, method,
                               {"run_ids": runs, "rows": int(len(rows)), "rows_hash": data_hash(used),
                                "ranks": max(1, int(len(ranks)))},
                               datetime.now(timezone.utc).isoformat())

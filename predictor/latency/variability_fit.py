"""Fit a hardware's variability sigmas from the repeats its sample store already holds.

Every timed repeat of ``prism sample`` is a row (:mod:`predictor.data.store`), ``repeats``
per shape, back to back. The spread of one shape's repeats is what the hardware does to
the same work from one call to the next:

``temporal``  the spread of compute ops' repeats (the per-step compute factor),
``regime``    the spread of collectives' repeats (the step's communication regime;
              each repeat is already the slowest rank's time),
``spatial``   the spread between ranks: where several ranks of one run timed the same
              shape (a cluster job, :mod:`sampling.runner`), the spread of their
              per-rank medians, less what the medians' own noise adds (step 5); 0 on
              one host with one rank (no GPU-to-GPU spread to see); not fitted for
              compute rows of several hosts without rank tags (the profile's cited
              figure stays).

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
3. sigma is a robust one, ``1.4826 * median |x_i - x_j| / sqrt(2)`` over every pair of
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
   rank's true level, so ``spatial = sqrt(max(0, s_b^2 - (pi/2) sigma_t^2 / n))`` with the
   temporal sigma and the mean repeats per rank; the interval resamples the shape groups.
"""
from __future__ import annotations

from datetime import datetime, timezone
from itertools import combinations

import numpy as np
import pandas as pd

from predictor.core.ops import OPS
from predictor.core.specs import HardwareConfig
from predictor.latency.artifacts import data_hash, shape_groups
from predictor.latency.variability_profile import MeasuredVariability, Sigma

#: Shortest group median (us) whose repeats count (module docstring, step 2).
MIN_US = 200.0
#: Fewest repeats a group needs to show a spread.
MIN_REPEATS = 3
#: ``origin`` of the rows ``prism sample`` timed (the importers' rows are summaries: ETT's
#: and the microbenchmarks' ``repeat`` numbers rows of one shape, not timed repeats).
SAMPLED = "sampled"
#: Bootstrap resamples of the shape groups for each interval.
BOOTSTRAP = 1000
#: 1 / Phi^-1(3/4): the MAD of a normal is this many times smaller than its sigma.
MAD_TO_SIGMA = 1.4826

METHOD = (f"robust sigma of log latency within shape groups (one shape's repeats in one run, median >= "
          f"{MIN_US:g} us, >= {MIN_REPEATS} repeats): {MAD_TO_SIGMA} x median |x_i - x_j| / sqrt(2) over pairs of "
          f"repeats, pooled over groups; 90% interval: {BOOTSTRAP} bootstrap resamples of the groups")


def _groups(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per repeat of ``rows``: its ``group`` (op, pass, shape, run and rank), its
    ``shape`` group (the same without the rank) and ``x``, the log latency."""
    parts = []
    for (op, pass_), g in rows.groupby(["op", "pass"], sort=True):
        shape = shape_groups(op, g)
        run = g["run_id"].astype(str).to_numpy() if "run_id" in g else np.zeros(len(g), str)
        rank = g["rank"].astype("Int64").astype(str).to_numpy() if "rank" in g else np.zeros(len(g), str)
        where = [f"{op}/{pass_}/{s}/{r}" for s, r in zip(shape, run)]
        parts.append(pd.DataFrame({"group": [f"{w}/{k}" for w, k in zip(where, rank)], "shape": where,
                                   "x": np.log(g["latency_us"].to_numpy())}))
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


def fit_variability(samples: pd.DataFrame, hw: HardwareConfig, seed: int = 0) -> MeasuredVariability | None:
    """``hw``'s temporal, spatial and regime sigmas from the repeats of ``samples``, or
    None where they hold no repeated compute shape timed by ``prism sample`` (imported
    rows are summaries) and so say nothing of variability. A component they cannot show (regime
    without repeated collectives, spatial with compute rows of several hosts) is left
    out: the profile's cited figure stays for it."""
    rows = samples[(samples["hardware"] == hw.name) & (samples["latency_us"] > 0)]
    if "origin" in rows:  # imported rows' ``repeat`` numbers summary values, not timed repeats
        rows = rows[rows["origin"].fillna(SAMPLED) == SAMPLED]
    collective = rows["op"].map(lambda op: OPS[op].collective).astype(bool)
    temporal = fit_sigma(rows[~collective], "compute ops' repeats", seed)
    if temporal is None:
        return None
    sigmas = {"temporal": temporal}
    spatial = fit_spatial(rows[~collective], temporal, seed) if "rank" in rows else None
    one_rank = "rank" not in rows or rows.loc[~collective, "rank"].nunique() <= 1
    if spatial is not None:
        sigmas["spatial"] = spatial
    elif one_rank and ("host" not in rows or rows.loc[~collective, "host"].nunique() <= 1):
        sigmas["spatial"] = Sigma(0.0, (0.0, 0.0), 0, 0, "one host: no GPU-to-GPU spread to see")
    regime = fit_sigma(rows[collective], "collectives' repeats (slowest rank)", seed)
    if regime is not None:
        sigmas["regime"] = regime
    used = rows[["op", "pass", "latency_us"] + (["run_id"] if "run_id" in rows else [])]
    runs = sorted(map(str, rows["run_id"].dropna().unique())) if "run_id" in rows else []
    ranks = rows[["host", "rank"]].drop_duplicates() if {"host", "rank"} <= set(rows) else rows[[]].head(1)
    return MeasuredVariability(hw.name, sigmas, METHOD,
                               {"run_ids": runs, "rows": int(len(rows)), "rows_hash": data_hash(used),
                                "ranks": max(1, int(len(ranks)))},
                               datetime.now(timezone.utc).isoformat())

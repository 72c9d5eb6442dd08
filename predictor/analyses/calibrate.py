"""``prism calibrate``: fit the in-situ calibration (:class:`~predictor.latency.calibration.Calibration`)
to measured reference steps, and score it honestly by leaving one layout out.

The three numbers are fitted by least squares on ``log(predicted median / measured
median)`` over the measured layouts, each prediction composed by the engine itself.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from predictor.analyses.validate import checked_inputs
from predictor.core.errors import PrismError
from predictor.core.specs import HardwareConfig
from predictor.data.measurements import check_step_unit, implausible_steps, measured_workloads
from predictor.engine.compose import compose
from predictor.engine.predictor import Predictor, QuantileCache, Workload
from predictor.latency.calibration import Calibration

#: Where a fit starts: compute at its sampled speed, 5 us of framework time per op and per tp collective.
START = Calibration(1.0, 5.0, 5.0)
#: The fit's bounds, in the order of the Calibration's numbers: they keep a poor fit physical.
LOW, HIGH = (0.25, 0.01, 0.01), (4.0, 1e4, 1e4)
#: A fit that still misses the measured steps by a factor of two (rms of the log error) explains
#: nothing: the steps are not of these models' machine, or not in seconds.
MAX_RMS_LOG_ERROR = float(np.log(2.0))
#: The fit's relative tolerance (scipy's ftol and xtol, 1e-8 by default). On the 16 layouts of
#: measurements/local-cpu-suite.parquet, 1e-4 moves no left-out prediction by more than 0.14%
#: and halves the fits' compositions (prism calibrate: 18.6 s -> 10.7 s of fitting).
TOLERANCE = 1e-4


def _fit(works: list[Workload], medians: np.ndarray, models, draws: int, start: Calibration = START,
         cache: QuantileCache | None = None, tol: float = TOLERANCE) -> Calibration:
    # the operator quantiles do not depend on the calibration: look them up once for the fit
    cache = cache or Predictor.with_models(models, works[0].hardware).pricer(works[0].hardware)
    # without a tp>1 layout no residual moves with tp_overhead_us: least squares would leave it where it
    # started (START's 5 us) and store that as if measured, so it keeps its neutral value instead
    free = np.array([True, True, any(w.parallel.tp > 1 for w in works)])
    neutral = Calibration()
    values = np.array([neutral.compute_scale, neutral.op_overhead_us, neutral.tp_overhead_us])

    def calibration(theta) -> list[float]:
        full = values.copy()
        full[free] = np.exp(theta)
        return [float(v) for v in full]

    def residuals(theta):
        cal = Calibration(*calibration(theta))
        pred = [np.median(compose(w, models, draws=draws, seed=0, cache=cache, calibration=cal).draws)
                for w in works]
        return np.log(np.asarray(pred) / medians)

    # log-parameters keep every factor positive; a neutral 0 in ``start`` (a term left unfitted) starts at its bound
    low, high = np.log(LOW)[free], np.log(HIGH)[free]
    x0 = np.log(np.clip([start.compute_scale, start.op_overhead_us, start.tp_overhead_us], LOW, HIGH))[free]
    fit = least_squares(residuals, x0=x0, diff_step=1e-3, bounds=(low, high), xtol=tol, ftol=tol)
    return Calibration(*calibration(fit.x), layouts=len(works), rms_log_error=float(np.sqrt(np.mean(fit.fun ** 2))),
                       unfitted="" if free[2] else "tp_overhead_us: no measured layout has tp>1, so no step shows a "
                                                   "tensor-parallel job's overhead; measure a tp=2 layout to fit it")


def _workloads(measured: pd.DataFrame, hw: HardwareConfig) -> tuple[list[str], list[Workload], np.ndarray]:
    layouts = measured_workloads(measured, hw)
    # copies of one layout under new ids would each count as a layout: the fit's minimum met by one job
    ids_of: dict[str, list[str]] = {}
    for lid, work, _ in layouts:
        ids_of.setdefault(repr((work.model, work.parallel)), []).append(lid)
    copies = [f"layout {ids[0]!r} is copied as {', '.join(map(repr, ids[1:]))}" for ids in ids_of.values()
              if len(ids) > 1]
    if copies:
        raise PrismError(f"measured: {'; '.join(copies)} (the same model_json and parallel_json under another "
                         f"layout_id); calibration counts each layout once: drop the copies' rows", field='measured')
    return ([lid for lid, _, _ in layouts], [w for _, w, _ in layouts],
            np.array([np.median(t) for _, _, t in layouts]))


def _check_units(ids: list[str], works: list[Workload], medians: np.ndarray, models, draws: int,
                 cache: QuantileCache, hw: HardwareConfig) -> None:
    """Refuse steps no calibration can explain before fitting to them (as prism validate
    refuses to score them): milliseconds given as seconds took seconds of fitting to reach a
    bound of the fit."""
    for layout_id, work, measured in zip(ids, works, medians):
        predicted = np.median(compose(work, models, draws=draws, seed=0, cache=cache, calibration=START).draws)
        check_step_unit(layout_id, float(measured), float(predicted), hw.name)


def fit_calibration(measured: pd.DataFrame, hw: HardwareConfig | str, models, draws: int = 100) -> Calibration:
    """Fit the three numbers to every layout of ``measured`` (at least 3 layouts; a number no
    layout bears on, tp_overhead_us without a tp>1 layout, stays neutral and is named in ``unfitted``)."""
    hw = checked_inputs(measured, hw, models)
    ids, works, medians = _workloads(measured, hw)
    if len(works) < 3:
        raise PrismError(f"measured: {len(works)} layout(s); calibration fits 3 numbers and needs at least 3 "
                         f"measured layouts, and prism calibrate, which also predicts each layout from a fit on the "
                         f"others, 4 (prism measure ... out=FILE, several times)", field='measured')
    cache = Predictor.with_models(models, hw).pricer(hw)  # one pricer for every fit's compositions
    _check_units(ids, works, medians, models, draws, cache, hw)
    cal = _fit(works, medians, models, draws, cache=cache)
    numbers = {"compute_scale": cal.compute_scale, "op_overhead_us": cal.op_overhead_us,
               "tp_overhead_us": cal.tp_overhead_us}
    pinned = [f"{k}={v:g}" for (k, v), lo, hi in zip(numbers.items(), LOW, HIGH)
              if np.isclose(v, hi, rtol=1e-3) or (k == "compute_scale" and np.isclose(v, lo, rtol=1e-3))]
    if pinned or cal.rms_log_error > MAX_RMS_LOG_ERROR:
        how = "reached its bound " + ", ".join(pinned) if pinned else "stopped"
        raise implausible_steps(f"no calibration explains these steps (the fit {how} with an rms log error of "
                                f"{cal.rms_log_error:.2f}, a typical miss of x{np.exp(cal.rms_log_error):.1f})",
                                hw.name)
    return cal


def cross_validate(measured: pd.DataFrame, hw: HardwareConfig | str, models, draws: int = 100,
                   start: Calibration = START) -> dict:
    """Leave-one-layout-out: layout_id -> the calibration fitted without it. Each fit starts
    from ``start``: the fit on every layout, where known, is a few steps from each
    leave-one-out optimum (the same optimum, reached in a third of the compositions)."""
    hw = checked_inputs(measured, hw, models)
    ids, works, medians = _workloads(measured, hw)
    if len(works) < 4:
        raise PrismError(f"measured: {len(works)} layout(s); leave-one-out calibration needs at least 4",
                         field='measured')
    cache = Predictor.with_models(models, hw).pricer(hw)  # one pricer for every fit's compositions
    _check_units(ids, works, medians, models, draws, cache, hw)
    keep = np.ones(len(works), bool)
    out = {}
    for i, layout_id in enumerate(ids):
        keep[:] = True
        keep[i] = False
        out[layout_id] = _fit([w for w, k in zip(works, keep) if k], medians[keep], models, draws, start, cache)
    return out

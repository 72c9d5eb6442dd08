"""The probabilistic composer: operator distributions -> step-time distribution.

docs/method.md, "Composer". For S Monte Carlo draws at once (numpy, no loop over draws):

1. Each distinct operator call of the decomposition (:mod:`predictor.workload.decompose`)
   gets its latency quantiles and the evidence they rest on
   (:mod:`predictor.latency.lookup`: trained models, the network prior or the roofline
   prior), and each stage's time is drawn by the composer's rules
   (:mod:`predictor.engine.stages`, the same code the search's screen runs).
2. Variability keeps its components apart (:data:`COMPONENTS`), so that any of them can
   be held at its median (``hold``): a per-step compute factor per GPU (``temporal``), a
   persistent per-GPU factor (``spatial``), one communication regime per step shared by
   every collective (``regime``), and each op instance's residual from its quantiles
   (``residual``); ``residual:<op>`` or ``residual:<op>/<pass>`` holds one op's residual
   alone. The sigmas are measured where a ``variability.json`` lies beside the models,
   else the hardware profile's cited ones
   (:func:`~predictor.latency.variability_profile.variability_of`). A stage runs at the
   pace of its slowest GPU, drawn as an order statistic (:mod:`predictor.engine.draws`),
   whatever the GPU count. Known-slow GPUs
   (``slow_gpus`` per stage, ``slow_factor`` slower) are a second such maximum, scaled by
   the factor.
3. The pipeline schedule (:mod:`predictor.engine.schedule`) is walked exactly over the
   draws; each stage's exposed DP collectives and optimizer step follow its last backward.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from predictor.core.errors import PrismError
from predictor.core.ops import Call
from predictor.core.specs import check_draws, check_number
from predictor.engine.draws import Spread, max_of_lognormals
from predictor.engine.schedule import steady_pipeline
from predictor.engine.stages import (
    BACKWARD_OVERLAPPED,
    BACKWARD_WORK,
    FORWARD_OVERLAPPED,
    FORWARD_WORK,
    PER_MICRO_BATCH,
    Part,
    StagePlan,
    draw_stage_sums,
    stage_times,
)
from predictor.latency.artifacts import ModelSet
from predictor.latency.calibration import Calibration
from predictor.latency.lookup import Evidence, QuantileCache
from predictor.latency.variability_profile import Variability, variability_of
from predictor.workload.decompose import Workload

REPORT_QUANTILES = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
#: Variability components of the composer (docs/method.md, Composer step 2); the first
#: varies within a job from step to step, spatial persists for a job's allocation.
COMPONENTS = ("temporal", "spatial", "regime", "residual")
#: Components that average out over the steps of a long run.
PER_STEP = ("temporal", "regime")

#: Monte Carlo draws of one prediction (``prism predict``, ``compare``).
DRAWS = 2000


@dataclass
class StepDistribution:
    """Step-time draws (seconds) and what they rest on."""

    draws: np.ndarray
    compute_s: float  # median critical-path compute of the slowest stage
    exposed_comm_s: float  # median communication not hidden behind compute
    bubble_s: float  # median pipeline idle time of the slowest stage
    host_s: float = 0.0  # median host time the slowest stage's device waits for (framework calls)
    evidence: dict[str, Evidence] = field(default_factory=dict)  # op/pass -> what its quantiles rest on
    prior_share: float = 0.0  # share of the step's operator time (medians) resting on priors
    variability: Variability | None = None  # the sigmas drawn from and where they come from

    @property
    def basis(self) -> dict[str, str]:
        """op/pass -> models/<hardware> | network prior (<network>) | roofline prior, as shown."""
        return {op: e.text for op, e in self.evidence.items()}

    def quantile(self, q) -> np.ndarray:
        return np.quantile(self.draws, q)

    def prob_below(self, t: float) -> float:
        return float(np.mean(self.draws <= t))


def workload_calls(work: Workload) -> list[Call]:
    """The distinct operator calls of a workload."""
    calls = [c for st in work.stages for c in st.forward + st.backward + st.step + ([st.p2p] if st.p2p else [])]
    return list(dict.fromkeys(calls))


def _slowest_gpus(spread: Spread, gpus: int, stages: int, slow_gpus, slow_factor: float, rng: np.random.Generator,
                  draws: int, brute_force: bool) -> np.ndarray:
    """(stages, draws) compute factor of each stage's slowest of ``gpus`` GPUs, of which
    ``slow_gpus[i]`` in stage i are ``slow_factor`` slower (empty: none); ``brute_force``
    draws every GPU's spatial and temporal factor and takes the slowest instead of the
    order statistic."""
    slow = list(slow_gpus) or [0] * stages
    speed = np.empty((stages, draws))
    for i, n_slow in enumerate(slow):
        if brute_force:
            factors = (spread.spatial * rng.standard_normal((gpus, draws))
                       + spread.temporal * rng.standard_normal((gpus, draws)))
            factors[:n_slow] += np.log(slow_factor)
            speed[i] = np.exp(factors).max(axis=0)
            continue
        speed[i] = max_of_lognormals(spread.gpu, gpus - n_slow, rng.uniform(size=draws))
        if slow_gpus:  # drawn whenever slow GPUs are modelled, so placements share random numbers
            slowest_slow = max_of_lognormals(spread.gpu, n_slow, rng.uniform(size=draws))
            speed[i] = np.maximum(speed[i], slow_factor * slowest_slow)
    return speed


def compose(work: Workload, models: ModelSet | None, draws: int = DRAWS, seed: int = 0,
            dtype: str | None = None, cache: QuantileCache | None = None,
            brute_force: bool = False, hold=(), calibration: Calibration | None = None,
            slow_gpus=(), slow_factor: float = 1.0) -> StepDistribution:
    """The step-time distribution of ``work`` (seconds, ``draws`` Monte Carlo samples).

    ``dtype`` is the compute precision (default: the hardware's ``train_dtype``).
    ``hold`` names components of :data:`COMPONENTS` held at their median (no spread), or
    one op's residual as ``residual:<op>`` (every pass) or ``residual:<op>/<pass>``. Held
    or not, the same random numbers are drawn, so two holds differ only in what is held.
    ``calibration`` (default: the one stored with ``models``, if any) corrects operator
    latencies for running inside a training step (:mod:`predictor.latency.calibration`).
    ``brute_force`` draws every GPU's spatial and temporal factor and takes the slowest
    instead of the order-statistic shortcut (for testing the shortcut; its cost grows
    with the GPU count).
    ``slow_gpus`` gives, per pipeline stage, how many of its GPUs are known to be
    ``slow_factor`` times slower in compute (slow nodes); empty: none.
    """
    return compose_holds(work, models, (hold,), draws, seed, dtype, cache, brute_force, calibration, slow_gpus,
                         slow_factor)[0]


def compose_holds(work: Workload, models: ModelSet | None, holds, draws: int = DRAWS, seed: int = 0,
                  dtype: str | None = None, cache: QuantileCache | None = None, brute_force: bool = False,
                  calibration: Calibration | None = None, slow_gpus=(), slow_factor: float = 1.0
                  ) -> list[StepDistribution]:
    """:func:`compose` of ``work`` once per hold of ``holds``, each exactly as its own call
    would compose it. The operator draws (:func:`~predictor.engine.stages.draw_stage_sums`)
    depend on a hold's residuals alone, so holds that take out the same residuals (a
    prediction and its run-persistent twin, ``hold=PER_STEP``) share them, and each goes on
    from the random state its own call would have reached."""
    check_number("seed", seed, integer=True, zero=True)
    check_draws("draws", draws)
    for hold in holds:
        unknown = {h for h in hold if h not in COMPONENTS and not h.startswith("residual:")}
        if unknown:
            raise PrismError(f"hold: unknown variability component(s) {sorted(unknown)}; choose from {COMPONENTS} "
                             f"or residual:<op>/<pass>", field='hold')
    hw, par, gpus = work.hardware, work.parallel, work.mesh.gpus_per_stage
    if slow_gpus and len(slow_gpus) != par.pp:
        raise PrismError(f"slow_gpus: {len(slow_gpus)} entries for {par.pp} pipeline stages; give one count per stage",
                         field='slow_gpus')
    if slow_gpus and (slow_factor <= 0 or max(slow_gpus) > gpus or min(slow_gpus) < 0):
        raise PrismError(f"slow_gpus={list(slow_gpus)}, slow_factor={slow_factor}: counts must lie in "
                         f"0..{gpus} (GPUs per stage) and the factor be positive", field='slow_gpus')
    variability = variability_of(hw, models)
    plan = StagePlan.of([work])
    cache = cache or QuantileCache(models, hw, dtype)
    drawn: dict[tuple, tuple] = {}  # the residuals a hold takes out -> (stage sums, random state after them)
    out = []
    for hold in holds:
        rng = np.random.default_rng(seed)
        residuals = tuple(sorted(h for h in hold if h == "residual" or h.startswith("residual:")))
        if residuals in drawn:
            sums, state = drawn[residuals]
            rng.bit_generator.state = state
        else:
            sums = draw_stage_sums(plan, models, cache, draws, rng, calibration, hold)
            drawn[residuals] = sums, rng.bit_generator.state
        out.append(_composed(work, plan, sums, Spread.of(variability.spec, hold), variability, rng, draws, gpus,
                             slow_gpus, slow_factor, brute_force))
    return out


def _composed(work: Workload, plan: StagePlan, sums, spread: Spread, variability: Variability,
              rng: np.random.Generator, draws: int, gpus: int, slow_gpus, slow_factor: float,
              brute_force: bool) -> StepDistribution:
    """Steps 2 and 3 of the module docstring from the stage sums of step 1."""
    hw, par = work.hardware, work.parallel
    regime = spread.regime_factor(rng, draws)
    speed = _slowest_gpus(spread, gpus, par.pp, slow_gpus, slow_factor, rng, draws, brute_force)
    t = stage_times(plan, sums.drawn, sums.buckets, slice(None), speed, regime)
    m = work.micro_batches
    # every micro-batch repeats its stage's draw, so the schedule's steady state can be skipped
    pipe = steady_pipeline(t.forward, t.backward, m, schedule=par.schedule, vpp=par.vpp, in_flight=t.in_flight)
    finish = pipe.rank_end + t.after
    step_us = finish.max(axis=0)
    slowest = int(np.argmax(np.median(finish, axis=1)))
    compute = np.median((t.forward_compute[slowest] + t.backward_compute[slowest]) * m + t.optimizer[slowest])
    comm = np.median((t.forward_comm[slowest] + t.backward_comm[slowest]) * m)
    idle = np.median(pipe.idle[slowest])
    host = np.median((t.forward_host[slowest] + t.backward_host[slowest]) * m)
    exposed = float(np.median(step_us - pipe.busy[slowest]) - idle - np.median(t.optimizer[slowest]) + comm)
    return StepDistribution(
        draws=step_us / 1e6,
        compute_s=float(compute) / 1e6,
        # a difference of sums: what is within their float round-off of none is none (not 3e-18 s)
        exposed_comm_s=exposed / 1e6 if exposed > 1e-9 * float(np.median(step_us)) else 0.0,
        bubble_s=float(idle) / 1e6,
        host_s=float(host) / 1e6,
        evidence={f"{c.op}/{c.pass_}": e for c, e in zip(sums.calls, sums.evidence)},
        prior_share=_prior_share(sums.nominal, sums.prior_nominal, plan.kind, m, hw.host.asynchronous),
        variability=variability)


#: Each pass's host part and the device parts its host time is set against.
_PASSES = ((Part.FORWARD_HOST, (*FORWARD_WORK, Part.FORWARD_COMM, *FORWARD_OVERLAPPED)),
           (Part.BACKWARD_HOST, (*BACKWARD_WORK, Part.BACKWARD_COMM, *BACKWARD_OVERLAPPED)))


def _prior_share(nominal: np.ndarray, prior: np.ndarray, kinds: np.ndarray, micro_batches: float,
                 asynchronous: bool) -> float:
    """Share of one step's time (every call at its median, every stage) that rests on
    priors: a feature of the predictive uncertainty, not of the step's spread. Host time
    counts where the device waits for it (all of it on a CPU, its excess over the device's
    pass on CUDA), with the share of it on priors."""
    n, p = nominal[:, kinds], prior[:, kinds]
    host = [part for part, _ in _PASSES]
    device = [part for part in Part if part not in host]
    per_step = np.where(np.isin(device, PER_MICRO_BATCH), micro_batches, 1.0)[:, None]
    total, on_priors = (n[device] * per_step).sum(), (p[device] * per_step).sum()
    for part, beside in _PASSES:
        wait = np.maximum(n[part] - n[list(beside)].sum(axis=0), 0.0) if asynchronous else n[part]
        share = np.divide(p[part], n[part], out=np.zeros_like(n[part]), where=n[part] > 0)
        total += (wait * micro_batches).sum()
        on_priors += (wait * share * micro_batches).sum()
    return float(on_priors / total) if total > 0 else 0.0

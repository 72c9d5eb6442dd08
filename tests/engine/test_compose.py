"""The composer on the shipped models: distributions, bases and structure."""
import numpy as np
import pandas as pd
import pytest
from scipy.special import ndtri

from predictor.app.config import load_config
from predictor.core.errors import PrismError
from predictor.core.ops import FFN_ROLE, TP_ROLES
from predictor.core.profiles import section
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig
from predictor.engine.compose import COMPONENTS, compose
from predictor.engine.draws import inverse_cdf
from predictor.engine.schedule import simulate_pipeline
from predictor.engine.stages import StagePlan, draw_stage_sums, stage_times
from predictor.latency.artifacts import ModelSet, models_dir
from predictor.latency.lookup import QuantileCache, Source, call_quantiles
from predictor.latency.regressor import DEFAULT_QUANTILES
from predictor.workload.decompose import decompose


def _setup(*overrides, hardware="a100-sxm4-80gb", model="gpt3-2.7b"):
    cfg = load_config([f"model={model}", f"hardware={hardware}", *overrides])
    hw = section(cfg, "hardware", HardwareConfig)
    work = decompose(section(cfg, "model", ModelConfig), section(cfg, "parallel", ParallelConfig), hw)
    return work, ModelSet.load(models_dir() / hw.name, hw)


def test_step_distribution_is_ordered_and_reproducible():
    work, models = _setup("parallel.tp=4", "parallel.pp=2", "parallel.dp=2", "parallel.global_batch_size=16")
    a, b = compose(work, models, draws=400, seed=1), compose(work, models, draws=400, seed=1)
    np.testing.assert_array_equal(a.draws, b.draws)
    p5, p50, p95 = a.quantile([0.05, 0.5, 0.95])
    assert 0 < p5 < p50 < p95 < 2 * p50
    assert a.bubble_s > 0 and a.compute_s > 0


def test_collectives_use_the_network_they_were_measured_on():
    work, models = _setup("parallel.tp=8", "parallel.global_batch_size=8")
    dist = compose(work, models, draws=100)
    # the A100 models' collectives are Perlmutter's (ETT): a DGX SuperPOD job takes its own network
    assert dist.evidence["all_reduce/step"].source is Source.NETWORK_PRIOR and dist.evidence["all_reduce/step"].prior
    assert dist.basis["all_reduce/step"] == f"network prior ({work.hardware.network.name})"
    assert dist.evidence["gemm/fwd"].source is Source.MODEL and dist.basis["gemm/fwd"] == "models/a100-sxm4-80gb"
    cpu_work, cpu_models = _setup("parallel.dp=2", "parallel.global_batch_size=2", hardware="local-cpu",
                                  model="tiny")
    assert compose(cpu_work, cpu_models, draws=100).basis["all_reduce/step"] == "models/local-cpu"


def test_calls_on_a_prior_carry_no_variability_and_are_counted():
    """A prior's spread is doubt about the median, not jitter a run would show: calls
    resting on one stay at their median in the step's draws (the predictive uncertainty
    states the doubt), and the step reports how much of it rests on priors."""
    work, models = _setup("parallel.tp=4", "parallel.pp=2", "parallel.dp=2", "parallel.global_batch_size=16")
    plan = StagePlan.of([work])
    for source, on_priors in ((None, True), (models, False)):
        sums = draw_stage_sums(plan, source, QuantileCache(source, work.hardware), 200, np.random.default_rng(0))
        assert all(e.prior for e in sums.evidence) == on_priors
        assert np.allclose(sums.drawn, sums.nominal[..., None]) == on_priors
        assert np.allclose(sums.prior_nominal, sums.nominal) == on_priors
    assert compose(work, None, draws=100).prior_share == pytest.approx(1.0)
    assert 0.0 < compose(work, models, draws=100).prior_share < 1.0


def test_single_gpu_step_is_the_sum_of_its_operators():
    work, models = _setup("parallel.global_batch_size=2", model="gpt3-1.3b")
    dist = compose(work, models, draws=2000, hold=("temporal", "spatial", "regime"))
    st = work.stages[0]

    def median(c):  # host ops and Megatron's loss (no A100 samples) rest on priors
        if c.role == "host" or not models.has(c.op, c.pass_):
            return c.count * call_quantiles([c], None, work.hardware, "bfloat16")[0][0][len(DEFAULT_QUANTILES) // 2]
        q = models.query(c.op, c.pass_, pd.DataFrame([dict(c.shape_dict, dtype="bfloat16")]))
        return c.count * q["q0.5"].iloc[0]

    # on CUDA each pass takes the longer of the device's and the host's timelines
    per_micro = sum(max(sum(median(c) for c in calls if c.role in ("compute", FFN_ROLE)),
                        sum(median(c) for c in calls if c.role == "host")) for calls in (st.forward, st.backward))
    optimizer = sum(median(c) for c in st.step if c.role in ("optimizer", "host"))  # the step's host work is serial
    expected = (per_micro * work.micro_batches + optimizer) / 1e6
    assert np.median(dist.draws) == pytest.approx(expected, rel=0.05)


@pytest.mark.parametrize("hardware, model, schedule, in_flight", [
    ("a100-sxm4-80gb", "gpt3-2.7b", "gpipe", True), ("a100-sxm4-80gb", "gpt3-2.7b", "1f1b", False),
    ("local-cpu", "tiny", "gpipe", False)])
def test_a_gpipe_sender_on_a_gpu_goes_on_while_its_transfer_flies(hardware, model, schedule, in_flight):
    """torch.distributed.pipelining's GPipe waits on its sends after the last pass, so on a
    GPU a transfer delays its receiver alone; its 1F1B, like Megatron, waits on each send,
    and on a CPU the send takes its sender's cores either way: the composer's step is the
    full schedule walk with the transfers placed so."""
    work, models = _setup("parallel.pp=2", "parallel.global_batch_size=8", f"parallel.schedule={schedule}",
                          hardware=hardware, model=model)
    dist = compose(work, models, draws=20, hold=COMPONENTS)
    plan = StagePlan.of([work])
    sums = draw_stage_sums(plan, models, QuantileCache(models, work.hardware), 1, np.random.default_rng(0))
    t = stage_times(plan, sums.nominal[..., None], sums.buckets, slice(None), np.ones((2, 1)), 1.0)
    f = (t.forward_compute + t.forward_comm + t.forward_host)[:, None]  # (pp, m=1, S=1), repeated below
    b = (t.backward_compute + t.backward_comm + t.backward_host)[:, None]
    send, back = t.send[:, None], t.send_back[:, None]
    assert send[0, 0, 0] > 0
    m = (1, work.micro_batches, 1)
    if in_flight:
        walk = simulate_pipeline(np.tile(f, m), np.tile(b, m), t.send, t.send, schedule)
    else:
        walk = simulate_pipeline(np.tile(f + send, m), np.tile(b + back, m), schedule=schedule)
    assert np.median(dist.draws) * 1e6 == pytest.approx((walk.rank_end + t.after).max(), rel=1e-9)


@pytest.mark.parametrize("gpus, tp, pp", [(64, 8, 2), (512, 8, 4)])
def test_order_statistic_shortcut_matches_drawing_every_gpu(gpus, tp, pp):
    work, models = _setup(f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={gpus // (tp * pp)}",
                          f"parallel.global_batch_size={4 * pp * gpus // (tp * pp)}", model="gpt3-13b")
    short = compose(work, models, draws=3000, seed=3)
    brute = compose(work, models, draws=3000, seed=3, brute_force=True)
    for q in (0.5, 0.95):
        assert short.quantile(q) == pytest.approx(brute.quantile(q), rel=0.02)


def test_each_variability_component_can_be_held_at_its_median():
    work, models = _setup("parallel.tp=8", "parallel.dp=4", "parallel.global_batch_size=32", model="gpt3-13b")
    spread = {}
    for held in [(), *[(c,) for c in COMPONENTS]]:
        d = compose(work, models, draws=3000, seed=5, hold=held)
        spread[held] = np.std(d.draws)  # the same random numbers: a component's own variance adds
    for c in ("temporal", "spatial", "regime"):  # each adds spread of its own
        assert spread[(c,)] < spread[()], c
    # the residuals, averaged over thousands of calls, are lost in the others' spread: alone they show
    alone = compose(work, models, draws=3000, seed=5, hold=("temporal", "spatial", "regime")).draws
    assert np.std(alone) > 1e-4 * np.median(alone)
    frozen = compose(work, models, draws=200, seed=5, hold=COMPONENTS).draws
    assert np.ptp(frozen) == pytest.approx(0, abs=1e-12)


def test_unknown_component_is_named():
    work, models = _setup("parallel.global_batch_size=2", model="gpt3-1.3b")
    with pytest.raises(PrismError, match="hold: unknown variability component"):
        compose(work, models, draws=10, hold=("weather",))


def test_inverse_cdf_draws_what_interpolating_each_row_alone_gives():
    """The vectorised draw against its exact version: np.interp of each row in z-space,
    the tails on the outermost pair's slope, no steeper than the whole span's."""
    rng = np.random.default_rng(3)
    levels = np.array([0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95])
    q = np.sort(rng.lognormal(3.0, 1.0, size=(40, len(levels))), axis=1)
    q[:5, -1] *= 20  # a stalled repeat's steep top pair: its tail takes the span's slope
    u = np.concatenate([rng.uniform(size=(40, 200)), np.tile([1e-6, 0.05, 0.5, 0.95, 1 - 1e-9], (40, 1))], axis=1)
    zl, z, logq = ndtri(levels), ndtri(np.clip(u, 1e-4, 1 - 1e-4)), np.log(q)
    expected, steep = np.empty_like(u), 0
    for i in range(len(q)):
        inner = np.interp(z[i], zl, logq[i])
        lo, hi = z[i] < zl[0], z[i] > zl[-1]
        span = (logq[i, -1] - logq[i, 0]) / (zl[-1] - zl[0])
        top = (logq[i, -1] - logq[i, -2]) / (zl[-1] - zl[-2])
        steep += top > span
        inner[lo] = logq[i, 0] + min((logq[i, 1] - logq[i, 0]) / (zl[1] - zl[0]), span) * (z[i][lo] - zl[0])
        inner[hi] = logq[i, -1] + min(top, span) * (z[i][hi] - zl[-1])
        expected[i] = np.exp(inner)
    assert steep >= 5  # the rule is exercised, not only the outermost pair's slope
    assert np.allclose(inverse_cdf(q, levels, u), expected, rtol=1e-12, atol=0)


def test_count_calls_add_up_to_count_times_the_mean_of_their_draws():
    """``count`` identical calls are ``count`` independent draws: their sum's mean is count x
    the draws' mean, however skewed (a CPU's small collectives: median far below the mean),
    checked against drawing each call's distribution directly."""
    from predictor.engine.draws import quantile_mean
    from predictor.engine.stages import Part
    work, models = _setup("parallel.tp=2", hardware="local-cpu", model="tiny")
    plan = StagePlan.of([work])
    sums = draw_stage_sums(plan, models, QuantileCache(models, work.hardware), 20000, np.random.default_rng(0))
    calls = [c for c in work.stages[0].forward if c.role in TP_ROLES]
    q, evidence = QuantileCache(models, work.hardware).lookup(calls)
    assert not any(e.prior for e in evidence)
    levels = np.asarray(DEFAULT_QUANTILES)
    direct = inverse_cdf(q, levels, np.random.default_rng(1).uniform(size=(len(q), 200000))).mean(axis=1)
    np.testing.assert_allclose(quantile_mean(q, levels), direct, rtol=0.01)
    counts = np.array([c.count for c in calls])
    expected = float(counts @ direct)
    assert sums.nominal[Part.FORWARD_COMM, 0] == pytest.approx(expected, rel=0.01)
    assert sums.drawn[Part.FORWARD_COMM, 0].mean() == pytest.approx(expected, rel=0.03)
    assert float(counts @ q[:, list(levels).index(0.5)]) < 0.9 * expected  # centred on the median: 14% short


def test_overlapped_tp_collectives_hide_under_their_own_side_s_gemms():
    """An overlapped TP collective is fused with a GEMM (userbuffers, PyTorch's async TP): the
    attention's collectives hide under its projections, the FFN's under the FFN's GEMMs; the
    pass's attention core and element-wise work cover neither; the expert all-to-alls run
    under the rest of the compute."""
    from predictor.engine.stages import _exposed

    def exposed(tp, tp_ffn, ep, compute, gemms, ffn_gemms, share=0.0):
        return float(_exposed(*(np.array([x], float) for x in (tp, tp_ffn, ep, compute, gemms, ffn_gemms)), share)[0])

    assert exposed(10, 0, 0, 100, 4, 0) == pytest.approx(6.0)  # 10 of TP against 4 of GEMMs, 100 in all
    assert exposed(3, 0, 0, 100, 4, 0) == 0.0
    # the FFN's wide GEMMs do not cover the attention's collectives: each side on its own
    assert exposed(10, 10, 0, 100, 4, 40) == pytest.approx(6.0)
    assert exposed(10, 50, 0, 100, 4, 40) == pytest.approx(16.0)
    # all-to-alls of 50 under the 86 the TP collectives left: hidden
    assert exposed(10, 10, 50, 100, 4, 40) == pytest.approx(6.0)
    # no TP: the all-to-alls against all the compute, holding a tenth of the SMs
    assert exposed(0, 0, 120, 100, 50, 0, 0.1) == pytest.approx(20.0)


def test_the_parameter_gather_hides_under_the_first_micro_batch_s_forward_only():
    """Megatron-Core's forward pre-hook waits on each bucket's gather and dispatches the next
    (``finish_param_sync``): the gathers run one bucket ahead of the first micro-batch's forward,
    so more micro-batches do not hide a gather longer than that forward (8B at 1,024 tokens over
    64 H100s: the bf16 gather outlasts one forward)."""
    from dataclasses import replace

    from predictor.core.job import Job
    from predictor.core.profiles import load_hardware, load_model
    from predictor.engine.predictor import Predictor

    predictor, hw = Predictor(), load_hardware("h100-sxm")
    model = replace(load_model("llama3-8b"), seq_length=1024)
    exposed = {}
    for micro in (1, 8):
        par = ParallelConfig(dp=64, micro_batch_size=1, global_batch_size=64 * micro, sharding="distributed_optimizer")
        exposed[micro] = predictor.step(Job(model, hw, par, 64, "megatron-core"), 50, 0).exposed_comm_s
    assert exposed[1] > 0.01 and exposed[8] == pytest.approx(exposed[1], rel=0.1)

"""The Predictor and its Job (predictor/engine/predictor.py, predictor/core/job.py): a job
decomposes, composes and reports as prism predict does, what jobs share is loaded and
priced once, and a job that cannot be names the field to fix."""
import numpy as np
import pytest

from predictor.analyses.predict import predict
from predictor.core.errors import PrismError
from predictor.core.job import Job, check_gpus
from predictor.core.profiles import load_hardware, load_model
from predictor.core.specs import ParallelConfig
from predictor.engine.compose import StepDistribution
from predictor.engine.predictor import Predictor
from predictor.engine.report import Prediction

DRAWS = 200


@pytest.fixture(scope="module")
def job():
    return Job.of("gpt3-1.3b", "a100-sxm4-80gb", {"tp": 2, "pp": 2}, gpus=16)


def test_job_of_resolves_the_layout(job):
    assert (job.parallel.tp, job.parallel.pp, job.parallel.dp, job.gpus) == (2, 2, 4, 16)
    assert job.given == ParallelConfig(tp=2, pp=2) and job.layout is job.given
    assert job.parallel.global_batch_size > 0  # the default batch filled in
    assert job.framework == "megatron-core"
    same = Job.of(load_model("gpt3-1.3b"), load_hardware("a100-sxm4-80gb"), ParallelConfig(tp=2, pp=2), 16)
    assert same == job and hash(same) == hash(job) and same.key == job.key
    assert Job.of("gpt3-1.3b", "a100-sxm4-80gb", {"tp": 2, "pp": 2}, gpus=32) != job


@pytest.mark.parametrize("args, field", [
    (dict(model="no-such-model"), "model"),
    (dict(hardware="no-such-gpu"), "hardware"),
    (dict(layout={"tq": 2}), "parallel.tq"),
    (dict(gpus=0), "gpus"),
    (dict(gpus=2.5), "gpus"),
    (dict(gpus=10), "gpus"),  # not a multiple of tp·pp
    (dict(framework="megatron"), "framework"),
    (dict(layout={"tp": 3}, gpus=3), "parallel.tp"),  # 3 does not divide the heads
])
def test_job_errors_name_the_field(args, field):
    given = dict(model="gpt3-1.3b", hardware="a100-sxm4-80gb", layout={"tp": 2, "pp": 2}, gpus=16) | args
    with pytest.raises(PrismError) as err:
        Job.of(given["model"], given["hardware"], given["layout"], given["gpus"],
               given.get("framework", "megatron-core"))
    assert err.value.field == field or err.value.field.startswith(field), (err.value.field, str(err.value))


def test_check_gpus_lives_in_core():
    assert check_gpus(None) is None and check_gpus(8.0) == 8
    import sampling.measure as measure  # the measuring side reads it from core, not from a verb
    assert measure.check_gpus is check_gpus


def test_workload_step_report(job):
    predictor = Predictor()
    work = predictor.workload(job)
    assert len(work.stages) == job.parallel.pp and work.gpus == 16
    assert all(st.forward and st.backward for st in work.stages)
    dist = predictor.step(job, draws=DRAWS, seed=3)
    assert isinstance(dist, StepDistribution) and dist.draws.shape == (DRAWS,) and np.all(dist.draws > 0)
    again = predictor.step(job, draws=DRAWS, seed=3)
    assert np.array_equal(dist.draws, again.draws)  # seeded: the same draws
    report = predictor.report(job, draws=DRAWS, seed=3)
    assert isinstance(report, Prediction)
    assert report.step_time_s["p50"] == pytest.approx(float(np.median(dist.draws)))
    assert report.tier == predictor.tier(job, dist) and report.memory_gib["total"] > 0 and report.tokens_per_s > 0
    assert report.predictive["median_step_s"]  # the predictive uncertainty beside the variability


def test_report_is_what_predict_reports(job):
    via_predict = predict("gpt3-1.3b", "a100-sxm4-80gb", ParallelConfig(tp=2, pp=2), 16, draws=DRAWS, seed=1)
    assert Predictor().report(job, draws=DRAWS, seed=1).to_dict() == via_predict.to_dict()


def test_what_jobs_share_is_kept(job):
    predictor = Predictor()
    other = Job.of("gpt3-1.3b", "a100-sxm4-80gb", {"tp": 1, "pp": 2}, gpus=16)
    assert predictor.models(job) is predictor.models(other) is not None  # loaded once per hardware
    assert predictor.pricer(job) is predictor.pricer(other)  # one quantile cache per hardware
    assert predictor.workload(job) is predictor.workload(Job.of("gpt3-1.3b", "a100-sxm4-80gb",
                                                                {"tp": 2, "pp": 2}, gpus=16))
    predictor.prefetch([job, other])
    priced = dict(predictor.pricer(job)._q)
    assert priced  # every call of both jobs priced in the prefetch
    predictor.step(job, draws=50)
    predictor.step(other, draws=50)
    assert predictor.pricer(job)._q.keys() == priced.keys()  # composing them priced nothing again
    elsewhere = Job.of("gpt3-1.3b", "h100-sxm", {"tp": 2, "pp": 2}, gpus=16)
    assert predictor.pricer(elsewhere) is not predictor.pricer(job)


def test_prefetch_leaves_a_bad_job_to_fail_alone(job):
    predictor = Predictor()
    bad = Job(load_model("gpt3-1.3b"), load_hardware("a100-sxm4-80gb"), ParallelConfig(tp=3, dp=1), 3, job.framework)
    predictor.prefetch([bad, job])  # no error: the good job is priced
    assert predictor.pricer(job)._q
    with pytest.raises(PrismError):
        predictor.workload(bad)


def test_one_run_is_the_step_to_step_part_at_the_median_level(job):
    """A run keeps its slowest GPUs and its kernels' speed for its whole length: one run's steps
    take the full draws' per-step factor over the persistent twin, at the full draws' median."""
    from predictor.engine.compose import PER_STEP
    from predictor.engine.report import one_run_draws

    predictor = Predictor()
    full, persistent = predictor.steps(job, [(), PER_STEP], draws=DRAWS, seed=3)
    one = one_run_draws(full.draws, persistent.draws)
    assert np.median(one) == pytest.approx(np.median(full.draws))
    spread = [np.quantile(d, 0.9) - np.quantile(d, 0.1) for d in (one, full.draws, persistent.draws)]
    assert 0 < spread[0] < spread[1]  # narrower than the full draws: the persistent part is out
    # known arithmetic: a persistent level drawn per draw times a per-step factor gives the factor back
    rng = np.random.default_rng(0)
    level, factor = np.exp(0.05 * rng.standard_normal(500)), np.exp(0.01 * rng.standard_normal(500))
    np.testing.assert_allclose(one_run_draws(10 * level * factor, 10 * level),
                               factor * 10 * np.median(level * factor) / np.median(factor))
    report = predictor.report(job, draws=DRAWS, seed=3)
    assert report.one_run_s["p50"] == pytest.approx(report.step_time_s["p50"])
    assert report.one_run_s["p10"] <= report.one_run_s["p50"] <= report.one_run_s["p90"]

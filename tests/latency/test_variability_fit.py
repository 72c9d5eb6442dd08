"""Variability measured, not assumed: sigmas fitted from the sample store's repeats
(predictor.latency.variability_fit), stored beside the models and used by the composer
in place of the profile's cited figures (predictor.latency.variability_profile)."""
import json

import numpy as np
import pandas as pd
import pytest

from predictor.app.config import load_config
from predictor.core.errors import PrismError
from predictor.core.profiles import REPO_ROOT, load_hardware, load_model, section
from predictor.core.specs import ParallelConfig, RegressorConfig
from predictor.data.store import read_samples
from predictor.engine.compose import compose
from predictor.latency.artifacts import ModelSet, models_dir, train
from predictor.latency.variability_fit import MIN_US, fit_drift, fit_sigma, fit_spatial, fit_variability
from predictor.latency.variability_profile import VARIABILITY_FILE, read_variability, variability_of, write_variability
from predictor.workload.decompose import decompose

CPU = load_hardware("local-cpu")
H100 = load_hardware("h100-sxm")
SAMPLES = REPO_ROOT / "samples" / "local-cpu"


def _store(drift=0.06, regime=0.15, shapes=160, repeats=9, rounds=3, sizes=10, collective_repeats=60, seed=0):
    """Synthetic rows timed as ``prism sample`` times them. Compute: ``shapes`` gemms of
    0.3-30 ms in ``rounds`` passes, a round every 0.25 s, each round's repeats one
    timestamp; the machine's speed holds for 2 s spells, lognormal by ``drift``, and each
    call jitters by 0.04 on its own; short gemms (below MIN_US), spread by 0.4, must be left
    out. Collectives: ``sizes`` all_reduce sizes timed round by round in one block (one
    timestamp), the sizes of a round sharing a lognormal factor of sigma ``regime``, each
    call 0.3 on its own. Returns the rows, the speeds the compute rounds ran at and the
    factors the collective rounds shared."""
    rng = np.random.default_rng(seed)
    start = pd.Timestamp("2026-11-27 06:00", tz="UTC")
    spells = drift * rng.standard_normal(1 + int(rounds * shapes * 0.25 / 2))
    rows, speeds, shares = [], [], []

    def add(op, pass_, shape, median_us, speed, sigma, t, first, n, **topology):
        rows.extend({"op": op, "pass": pass_, "dtype": "float32", **shape, **topology, "repeat": first + j,
                     "timestamp": start + pd.Timedelta(seconds=t),
                     "latency_us": median_us * np.exp(speed + sigma * z)} for j, z in enumerate(rng.standard_normal(n)))

    medians = np.exp(rng.uniform(np.log(300), np.log(30000), shapes))
    share = [repeats // rounds + (r < repeats % rounds) for r in range(rounds)]
    for r in range(rounds):
        for i in range(shapes):
            t = 0.25 * (r * shapes + i)
            speed = spells[int(t / 2)]
            speeds.append(speed)
            add("gemm", "fwd", {"m": 64 + i, "n": 256, "k": 256}, medians[i], speed, 0.04, t, sum(share[:r]), share[r])
            add("gemm", "fwd", {"m": 64 + i, "n": 8, "k": 8}, MIN_US / 20, speed, 0.4, t, sum(share[:r]), share[r])
    block = rounds * shapes * 0.25
    for j in range(collective_repeats):
        shared = regime * rng.standard_normal()
        shares.append(shared)
        for i in range(sizes):
            add("all_reduce", "step", {"message_bytes": 2.0 ** (10 + i), "group_size": 2.0}, 1000.0 * (i + 1),
                shared, 0.3, block, j, 1, ranks_per_node=2, nodes=1)
    rows = pd.DataFrame(rows).assign(hardware=CPU.name, run_id="synthetic-run", origin="sampled", host="vm")
    return rows, np.array(speeds), np.array(shares)


def test_fit_recovers_known_sigmas_from_a_synthetic_store():
    rows, speeds, shares = _store()
    fitted = fit_variability(rows, CPU)
    t, r, s = (fitted.sigmas[k] for k in ("temporal", "regime", "spatial"))
    assert t.sigma == pytest.approx(np.std(speeds), rel=0.2) and t.interval90[0] < t.sigma < t.interval90[1]
    assert r.sigma == pytest.approx(np.std(shares), rel=0.2) and r.interval90[0] < r.sigma < r.interval90[1]
    assert (t.shapes, t.repeats) == (160, 480)  # shape groups, their rounds: the short gemms are left out
    assert (r.shapes, r.repeats) == (60, 600)  # rounds, their calls
    assert s.sigma == 0.0 and "one host" in s.basis
    assert fitted.samples["run_ids"] == ["synthetic-run"]
    steady, *_ = _store(drift=0.0)
    assert fit_variability(steady, CPU).sigmas["temporal"].sigma < 0.01  # the calls' own jitter is no drift


def test_fit_says_nothing_the_samples_cannot_show():
    rows, *_ = _store()
    compute = rows[rows.op == "gemm"]
    assert fit_variability(compute[compute.groupby("m").timestamp.transform("min") == compute.timestamp], CPU) is None
    assert fit_variability(rows.assign(origin="ett:Perlmutter/gemm"), CPU) is None  # an importer's summaries
    no_collectives = fit_variability(compute, CPU)
    assert set(no_collectives.sigmas) == {"temporal", "spatial"}  # regime stays the profile's
    assert variability_of(CPU, _with(no_collectives)).spec.comm_regime_cv == CPU.variability.comm_regime_cv


def test_a_store_timed_before_rounds_keeps_the_cited_figures():
    """samples/local-cpu was timed shape by shape: its repeats show each call's jitter,
    which the op models hold, and no drift of the machine between them."""
    assert fit_variability(read_samples(SAMPLES), CPU) is None


def _with(measured, hw=CPU) -> ModelSet:
    return ModelSet(hw, (0.05, 0.5, 0.95), {}, {}, measured)


def _in_rounds(rows: pd.DataFrame, rounds: int = 3) -> pd.DataFrame:
    """``rows``, timed shape by shape, stamped as ``prism sample`` times them in rounds
    (sampling.rounds): each shape's repeats split over ``rounds`` passes over the run, the
    first taking the remainder, each pass after the one before."""
    stamp = pd.to_datetime(rows["timestamp"], utc=True)
    span = stamp.max() - stamp.min() + pd.Timedelta(seconds=2)
    per_shape = rows.groupby(["op", "pass", "m", "n", "k", "dtype"])["repeat"].transform("size")
    return rows.assign(timestamp=stamp + span * (rows["repeat"] * rounds // per_shape))


def test_a_drift_the_samples_cannot_tell_from_zero_keeps_the_cited_figure():
    """A 7.5 s H100 run's gemms, timed in 3 rounds: 4 shape groups of 200 us or more show
    a drift whose 90% interval reaches 0; fitted as the temporal sigma it would replace the
    profile's cited figure with what seconds of samples cannot tell from none at all."""
    rows = read_samples(REPO_ROOT / "samples" / "h100")
    gemms = _in_rounds(rows[(rows.run_id == "h100-sxm-20261126T062140-33dd26") & (rows.op == "gemm")])
    drift = fit_drift(gemms)
    assert drift.interval90[0] == 0.0 and drift.shapes == 4
    fitted = fit_variability(gemms, H100)
    assert "temporal" not in fitted.sigmas and "one host" in fitted.sigmas["spatial"].basis
    assert (f"cited figure kept for temporal {H100.variability.temporal_cv:g} (fitted {drift.sigma:.3g}, 90% 0-"
            f"{drift.interval90[1]:.3g}, 4 shape groups)") in fitted.method
    v = variability_of(H100, _with(fitted, H100))
    assert v.spec.temporal_cv == H100.variability.temporal_cv and v.to_dict()["temporal"]["source"] == "cited"


def test_a_regime_the_rounds_cannot_tell_from_zero_keeps_the_cited_figure():
    rows, *_ = _store(regime=0.0)
    fitted = fit_variability(rows, CPU)
    assert set(fitted.sigmas) == {"temporal", "spatial"}  # the drift stands: its interval is well above 0
    assert "cited figure kept for regime" in fitted.method and "60 rounds" in fitted.method
    assert variability_of(CPU, _with(fitted)).spec.comm_regime_cv == CPU.variability.comm_regime_cv


def test_the_composer_uses_the_measured_file_when_present_and_the_cited_figures_when_not():
    bare = ModelSet.load(models_dir() / CPU.name, CPU)
    assert bare.variability is None  # the shipped set keeps the cited figures (docs/method.md, "Measured variability")
    shipped = ModelSet(CPU, bare.quantiles, bare.models, bare.manifest)
    shipped.variability = fit_variability(_store()[0], CPU)
    work = decompose(load_model("tiny"), ParallelConfig(dp=2, global_batch_size=8), CPU)
    measured, cited = compose(work, shipped, draws=400), compose(work, bare, draws=400)
    assert measured.variability.measured is shipped.variability
    assert measured.variability.spec.temporal_cv == shipped.variability.sigmas["temporal"].sigma
    assert cited.variability.measured is None and cited.variability.spec == CPU.variability
    assert cited.variability.to_dict()["source"] == "cited"
    assert not np.allclose(measured.draws, cited.draws)
    # a profile that borrows the models (models_from) keeps its own cited variability
    other = load_hardware("h200")
    assert variability_of(other, shipped.with_hardware(other)).measured is None


def test_train_saves_the_fit_with_the_models_and_load_reads_it(tmp_path):
    rows, *_ = _store()
    models = train(rows[rows.op == "gemm"], CPU, _regressor(), n_jobs=1)
    models.variability = fit_variability(rows, CPU)
    models.save(tmp_path / CPU.name)
    loaded = ModelSet.load(tmp_path / CPU.name, CPU)
    assert loaded.variability == models.variability
    models.variability = None  # a retrain without repeats leaves no stale file behind
    models.save(tmp_path / CPU.name)
    assert not (tmp_path / CPU.name / VARIABILITY_FILE).exists()


def _regressor() -> RegressorConfig:
    rc = section(load_config([]), "regressor", RegressorConfig)
    rc.params.update(n_estimators=20)
    return rc


def test_a_damaged_file_names_itself_and_the_fix(tmp_path):
    path = write_variability(tmp_path, fit_variability(_store()[0], CPU))
    data = json.loads(path.read_text())
    data["sigmas"]["jitter"] = data["sigmas"].pop("temporal")
    path.write_text(json.dumps(data))
    with pytest.raises(PrismError, match="prism train") as err:
        read_variability(tmp_path)
    assert err.value.field == str(path)
    assert read_variability(tmp_path / "nowhere") is None


def _ranked_store(spatial, ranks=16, temporal=0.04, shapes=40, repeats=10, seed=1):
    """Compute rows of a cluster job: every rank times the same gemm shapes; rank r runs at
    a persistent speed factor exp(offset_r), offset_r ~ N(0, spatial); returns the rows
    and the offsets drawn."""
    rng = np.random.default_rng(seed)
    offsets = spatial * rng.standard_normal(ranks)
    rows = []
    for i in range(shapes):
        median = np.exp(rng.uniform(np.log(300), np.log(30000)))
        for r, off in enumerate(offsets):
            rows.extend({"op": "gemm", "pass": "fwd", "dtype": "float32", "m": 64 + i, "n": 256, "k": 256,
                         "repeat": j, "rank": r, "host": f"node{r // 8}",
                         "latency_us": median * np.exp(off + temporal * z)}
                        for j, z in enumerate(rng.standard_normal(repeats)))
    return pd.DataFrame(rows).assign(hardware=CPU.name, run_id="cluster-run", origin="sampled"), offsets


def test_spatial_is_fitted_from_per_rank_medians_of_the_same_shapes():
    rows, offsets = _ranked_store(spatial=0.05)
    fitted = fit_variability(rows, CPU)
    s = fitted.sigmas["spatial"]
    pairs = np.abs(offsets[:, None] - offsets[None, :])[np.triu_indices(len(offsets), 1)]
    drawn = 1.4826 * np.median(pairs) / np.sqrt(2)  # the spread these 16 ranks really have
    assert s.sigma == pytest.approx(drawn, rel=0.15) and s.interval90[0] <= s.sigma <= s.interval90[1]
    assert (s.shapes, s.repeats) == (40, 40 * 16) and "16 ranks" in s.basis
    assert "temporal" not in fitted.sigmas  # timed shape by shape: no drift to see
    assert fitted.samples["ranks"] == 16


def test_equal_ranks_fit_no_spatial_spread_from_the_medians_own_noise():
    rows, _ = _ranked_store(spatial=0.0)
    s = fit_spatial(rows, fit_sigma(rows, "compute ops' repeats"))
    assert s.sigma < 0.006  # uncorrected, the medians of 10 repeats would scatter by ~0.016
    assert s.interval90[0] == 0.0 and fit_variability(rows, CPU) is None  # no spread told from 0: the cited stays


def test_the_composer_takes_a_measured_spatial_sigma():
    rows, _ = _ranked_store(spatial=0.05)
    fitted = fit_variability(rows, CPU)
    v = variability_of(CPU, _with(fitted))
    assert v.spec.spatial_cv == fitted.sigmas["spatial"].sigma != CPU.variability.spatial_cv
    assert v.to_dict()["spatial"]["source"] == "measured" and v.to_dict()["spatial"]["repeats"] == 640

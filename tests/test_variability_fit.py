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
from predictor.latency.variability_fit import MIN_US, fit_variability
from predictor.latency.variability_profile import VARIABILITY_FILE, read_variability, variability_of, write_variability
from predictor.workload.decompose import decompose

CPU = load_hardware("local-cpu")
SAMPLES = REPO_ROOT / "samples" / "local-cpu"


def _store(temporal=0.04, regime=0.15, shapes=80, repeats=10, seed=0) -> pd.DataFrame:
    """Synthetic sampled rows: gemm shapes of 0.3-30 ms whose repeats spread lognormally
    by ``temporal``, all_reduce messages of 0.3-30 ms by ``regime``, and short gemms
    (below MIN_US) spread ten times wider, which the fit must leave out."""
    rng = np.random.default_rng(seed)
    rows = []

    def add(op, pass_, shape, median_us, sigma, **topology):
        rows.extend({"op": op, "pass": pass_, "dtype": "float32", **shape, **topology, "repeat": r,
                     "latency_us": median_us * np.exp(sigma * z)} for r, z in enumerate(rng.standard_normal(repeats)))

    def median_us():
        return np.exp(rng.uniform(np.log(300), np.log(30000)))

    for i in range(shapes):
        add("gemm", "fwd", {"m": 64 + i, "n": 256, "k": 256}, median_us(), temporal)
        add("gemm", "fwd", {"m": 64 + i, "n": 8, "k": 8}, MIN_US / 20, 10 * temporal)
    for i in range(shapes // 4):
        add("all_reduce", "step", {"message_bytes": 2.0 ** (10 + i), "group_size": 2.0}, median_us(), regime,
            ranks_per_node=2, nodes=1)
    return pd.DataFrame(rows).assign(hardware=CPU.name, run_id="synthetic-run", origin="sampled", host="vm")


def test_fit_recovers_known_sigmas_from_a_synthetic_store():
    fitted = fit_variability(_store(), CPU)
    t, r, s = (fitted.sigmas[k] for k in ("temporal", "regime", "spatial"))
    assert t.sigma == pytest.approx(0.04, rel=0.1) and t.interval90[0] < 0.04 < t.interval90[1]
    assert r.sigma == pytest.approx(0.15, rel=0.15) and r.interval90[0] < 0.15 < r.interval90[1]
    assert (t.shapes, t.repeats) == (80, 800)  # the short gemms are left out
    assert (r.shapes, r.repeats) == (20, 200)
    assert s.sigma == 0.0 and "one host" in s.basis
    assert fitted.samples["run_ids"] == ["synthetic-run"]


def test_fit_says_nothing_without_timed_repeats():
    one = _store(repeats=1)
    assert fit_variability(one, CPU) is None  # one repeat per shape: no spread to see
    imported = _store().assign(origin="ett:Perlmutter/gemm")
    assert fit_variability(imported, CPU) is None  # an importer's repeat numbers summaries
    no_collectives = fit_variability(_store()[lambda d: d.op == "gemm"], CPU)
    assert set(no_collectives.sigmas) == {"temporal", "spatial"}  # regime stays the profile's
    assert variability_of(CPU, _with(no_collectives)).spec.comm_regime_cv == CPU.variability.comm_regime_cv


def test_fit_on_the_shipped_samples_is_finite_with_n():
    fitted = fit_variability(read_samples(SAMPLES), CPU)
    for name in ("temporal", "regime"):
        s = fitted.sigmas[name]
        assert np.isfinite(s.sigma) and 0 < s.interval90[0] <= s.sigma <= s.interval90[1]
        assert s.shapes >= 10 and s.repeats >= 10 * s.shapes
    assert fitted.sigmas["spatial"].sigma == 0.0


def _with(measured) -> ModelSet:
    return ModelSet(CPU, (0.05, 0.5, 0.95), {}, {}, measured)


def test_the_composer_uses_the_measured_file_when_present_and_the_cited_figures_when_not():
    bare = ModelSet.load(models_dir() / CPU.name, CPU)
    assert bare.variability is None  # the shipped set keeps the cited figures (README: fit_variability)
    shipped = ModelSet(CPU, bare.quantiles, bare.models, bare.manifest)
    shipped.variability = fit_variability(read_samples(SAMPLES), CPU)
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
    rows = _store()
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
    path = write_variability(tmp_path, fit_variability(_store(), CPU))
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
    s, t = fitted.sigmas["spatial"], fitted.sigmas["temporal"]
    pairs = np.abs(offsets[:, None] - offsets[None, :])[np.triu_indices(len(offsets), 1)]
    drawn = 1.4826 * np.median(pairs) / np.sqrt(2)  # the spread these 16 ranks really have
    assert s.sigma == pytest.approx(drawn, rel=0.15) and s.interval90[0] <= s.sigma <= s.interval90[1]
    assert (s.shapes, s.repeats) == (40, 40 * 16) and "16 ranks" in s.basis
    assert t.sigma == pytest.approx(0.04, rel=0.1)  # per rank: the ranks' offsets do not widen it
    assert fitted.samples["ranks"] == 16


def test_equal_ranks_fit_no_spatial_spread_from_the_medians_own_noise():
    rows, _ = _ranked_store(spatial=0.0)
    s = fit_variability(rows, CPU).sigmas["spatial"]
    assert s.sigma < 0.006  # uncorrected, the medians of 10 repeats would scatter by ~0.016


def test_the_composer_takes_a_measured_spatial_sigma():
    rows, _ = _ranked_store(spatial=0.05)
    fitted = fit_variability(rows, CPU)
    v = variability_of(CPU, _with(fitted))
    assert v.spec.spatial_cv == fitted.sigmas["spatial"].sigma != CPU.variability.spatial_cv
    assert v.to_dict()["spatial"]["source"] == "measured" and v.to_dict()["spatial"]["repeats"] == 640

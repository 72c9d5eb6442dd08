"""The speed-ups of issue 51 compute what the code before them computed: the normal
quantile without scipy.special, the stage sums' sparse product without scipy.sparse, two
holds composed from one set of operator draws, 1F1B draws that skip ahead on their own,
conf/ YAML read by libyaml, and numpy's deferred modules still there when used."""
import numpy as np
import pytest
import yaml
from omegaconf._utils import get_yaml_loader
from scipy.sparse import csr_matrix
from scipy.special import ndtr as scipy_ndtr
from scipy.special import ndtri as scipy_ndtri

from predictor.core import normal
from predictor.core.job import Job
from predictor.core.profiles import CONF_DIR, _load_yaml
from predictor.engine.compose import PER_STEP, compose, compose_holds
from predictor.engine.predictor import Predictor
from predictor.engine.schedule import _one_f_one_b_rounds, simulate_pipeline
from predictor.engine.stages import _weighted_rows


def test_ndtri_is_scipys_bit_for_bit(monkeypatch):
    import sys
    monkeypatch.delitem(sys.modules, "scipy.special")  # the numpy code, not scipy's ufunc
    u = np.concatenate([np.random.default_rng(0).uniform(size=100_000), np.logspace(-300, -1, 300),
                        1 - np.logspace(-16, -1, 100), [0.0, 1.0, 0.5, 1e-4, 1 - 1e-4]])
    assert np.array_equal(normal.ndtri(u), scipy_ndtri(u))
    assert np.isnan(normal.ndtri(np.array([-0.1, 1.1]))).all()
    x = np.linspace(-12, 12, 2001)
    assert np.allclose(normal.ndtr(x), scipy_ndtr(x), rtol=1e-12, atol=1e-16)


def test_weighted_rows_is_the_sparse_product():
    rng = np.random.default_rng(1)
    for _ in range(10):
        n, size, k = rng.integers(1, 200), rng.integers(1, 300), rng.integers(1, 2000)
        rows, cols, w = rng.integers(0, size, k), rng.integers(0, n, k), rng.uniform(size=k)
        values = rng.normal(size=(n, 40))
        want = csr_matrix((w, (rows, cols)), shape=(size, n)) @ values
        assert np.allclose(_weighted_rows(rows, cols, w, values, size), want, rtol=1e-13, atol=1e-13)


def test_holds_composed_together_are_each_composed_alone():
    job = Job.of("gpt3-1.3b", "a100-sxm4-80gb", {"tp": 2, "pp": 4}, gpus=32)
    predictor = Predictor()
    work, models, cache = predictor.workload(job), predictor.models(job), predictor.pricer(job)
    together = compose_holds(work, models, [(), PER_STEP, ("residual",)], draws=300, seed=7, cache=cache)
    for hold, dist in zip([(), PER_STEP, ("residual",)], together):
        alone = compose(work, models, draws=300, seed=7, cache=cache, hold=hold)
        assert np.array_equal(dist.draws, alone.draws)


def test_1f1b_draws_settling_apart_match_the_full_walk():
    rng = np.random.default_rng(3)
    pp, m, s = 6, 60, 64
    fwd = np.exp(0.05 * rng.standard_normal((pp, s)))
    bwd = 2 * np.exp(0.05 * rng.standard_normal((pp, s)))
    fwd[:, :8] = 1.0  # draws whose stages are all alike settle at once; the rest take longer
    bwd[:, :8] = 2.0
    ends = _one_f_one_b_rounds(fwd, bwd, m)
    full = simulate_pipeline(np.broadcast_to(fwd[:, None, :], (pp, m, s)),
                             np.broadcast_to(bwd[:, None, :], (pp, m, s))).rank_end
    assert np.allclose(ends, full, rtol=1e-12, atol=0)


def test_conf_yaml_reads_as_omegaconf_reads_it():
    slow = get_yaml_loader()
    files = sorted(CONF_DIR.rglob("*.yaml"))
    assert files
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert repr(_load_yaml(text)) == repr(yaml.load(text, Loader=slow)), path
    with pytest.raises(yaml.YAMLError) as fast_err:
        _load_yaml("a: [1\n")
    with pytest.raises(yaml.YAMLError) as slow_err:
        yaml.load("a: [1\n", Loader=slow)
    assert str(fast_err.value) == str(slow_err.value)  # a broken file is described as it always was
    with pytest.raises(yaml.YAMLError, match="duplicate key"):
        _load_yaml("a: 1\na: 2\n")


def test_deferred_numpy_modules_load_when_used():
    import subprocess
    import sys
    code = ("import predictor.engine, sys; import xgboost; "
            "assert 'numpy.f2py.crackfortran' not in sys.modules; "
            "import numpy.testing as t; t.assert_allclose(1.0, 1.0); "
            "import numpy; assert numpy.ma.masked_array([1, 2]).sum() == 3; "
            "from numpy.f2py import run_main; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]

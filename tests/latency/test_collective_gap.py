"""A CPU collective's latency by the compute gap before it: the sampler's rounds, the curve
``prism train`` stores, and the composer's use of it (predictor.latency.collective_gap)."""
import json
import subprocess
import sys
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from predictor.app.config import load_config
from predictor.core.errors import PrismError
from predictor.core.ops import TP_ROLES
from predictor.core.profiles import section
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig, RegressorConfig
from predictor.data import store
from predictor.engine.stages import BACKWARD_WORK, FORWARD_WORK, Part, StagePlan, draw_stage_sums
from predictor.latency.adjustments.collective_gap import gap_curve, is_curve, ratio_at
from predictor.latency.artifacts import ModelSet, models_dir, train
from predictor.latency.lookup import QuantileCache
from predictor.latency.origins import GAPS_S, STEP_GAP_S
from predictor.latency.origins import gap_origin as origin_of
from predictor.workload.decompose import decompose
from sampling.cpu.collective_gap import rounds


def test_a_cpu_collective_s_rounds_interleave_a_third_as_many_at_each_shorter_gap():
    timed = rounds(30, gaps=True)
    assert Counter(origin for _, origin in timed) == {None: 30, origin_of(GAPS_S[0]): 10, origin_of(GAPS_S[1]): 10}
    assert timed[:3] == [(STEP_GAP_S, None), (GAPS_S[0], origin_of(GAPS_S[0])), (GAPS_S[1], origin_of(GAPS_S[1]))]
    assert timed[-1] == (STEP_GAP_S, None)  # the shorter gaps' rounds spread over the first third, one per round
    assert rounds(3, gaps=False) == [(0.0, None)] * 3  # a GPU's: straight after the barrier


def _rows(ratios: dict[int, float], sizes=(1024, 65536, 1 << 20), run="r1") -> pd.DataFrame:
    """A collective's rows at each size: the reference gap at 1000 us + size/1000, each gap at ``ratios[gap]`` of it."""
    rows = []
    for size in sizes:
        base = 1000 + size / 1000
        for gap_us, ratio in {round(STEP_GAP_S * 1e6): 1.0, **ratios}.items():
            origin = "sampled" if gap_us == round(STEP_GAP_S * 1e6) else origin_of(gap_us / 1e6)
            rows += [dict(op="all_reduce", message_bytes=size, group_size=2, nodes=1, ranks_per_node=2, run_id=run,
                          origin=origin, latency_us=base * ratio * f) for f in (0.9, 1.0, 1.1)]
    return pd.DataFrame(rows)


def test_the_curve_is_the_median_over_sizes_of_each_gap_over_the_reference():
    curve = gap_curve(_rows({500: 0.4, 2000: 0.6}), STEP_GAP_S)
    assert curve == {"gaps_us": [500, 2000, 10000], "ratios": [0.4, 0.6, 1.0], "sizes": 3}
    assert is_curve(curve)
    assert gap_curve(_rows({500: 0.4}, sizes=(1024, 2048)), STEP_GAP_S) is None  # too few sizes to say
    assert gap_curve(_rows({}), STEP_GAP_S) is None  # no gap rows: a GPU's, or a store sampled before them


def test_the_ratio_is_interpolated_in_log_gap_and_flat_beyond_the_ends():
    curve = {"gaps_us": [500, 2000, 10000], "ratios": [0.4, 0.6, 1.0]}
    np.testing.assert_allclose(ratio_at(curve, [100, 500, 1000, 2000, 10000, 50000]),
                               [0.4, 0.4, 0.5, 0.6, 1.0, 1.0])
    np.testing.assert_allclose(ratio_at(None, [100, 1e6]), [1.0, 1.0])
    for bad in ({"gaps_us": [500], "ratios": [1.0]}, {"gaps_us": [2000, 500], "ratios": [0.5, 1.0]},
                {"gaps_us": [500, 10000], "ratios": [0.0, 1.0]}, {"gaps_us": [500, 10000]}, [0.5, 1.0]):
        assert not is_curve(bad)


def _tiny(*overrides):
    cfg = load_config(["model=tiny", "hardware=local-cpu", *overrides])
    hw = section(cfg, "hardware", HardwareConfig)
    return decompose(section(cfg, "model", ModelConfig), section(cfg, "parallel", ParallelConfig), hw), hw


def test_a_pass_s_collectives_take_the_ratio_at_the_compute_shared_among_them():
    work, hw = _tiny("parallel.tp=2")
    models = ModelSet.load(models_dir() / hw.name, hw)
    curve = {"gaps_us": [500, 2000, 10000], "ratios": [0.4, 0.6, 1.0], "sizes": 3}
    gapped = ModelSet(hw, models.quantiles, models.models, {**models.manifest, "collective_gap": curve})
    plan = StagePlan.of([work])
    plain, scaled = (draw_stage_sums(plan, m, QuantileCache(m, hw), 50, np.random.default_rng(0))
                     for m in (models, gapped))
    stage = work.stages[0]
    for comm, compute, host, calls in ((Part.FORWARD_COMM, list(FORWARD_WORK), Part.FORWARD_HOST, stage.forward),
                                       (Part.BACKWARD_COMM, list(BACKWARD_WORK), Part.BACKWARD_HOST, stage.backward)):
        collectives = sum(c.count for c in calls if c.role in TP_ROLES)
        gap = (plain.nominal[compute, 0].sum() + plain.nominal[host, 0]) / collectives
        assert plain.nominal[comm, 0] > 0
        assert scaled.nominal[comm, 0] == pytest.approx(plain.nominal[comm, 0] * ratio_at(curve, gap))
        np.testing.assert_allclose(scaled.drawn[comm, 0], plain.drawn[comm, 0] * ratio_at(curve, gap))
        assert (scaled.nominal[compute, 0] == plain.nominal[compute, 0]).all()  # the compute is not the collectives'


@pytest.mark.slow
def test_a_cpu_sample_times_each_gap_and_train_keeps_the_curve_apart_from_the_op_models(tmp_path, cpu_env):
    args = ["sample", "hardware=local-cpu", "sampling=quick", "sampling.ops=[all_reduce]", "sampling.message_sizes=4",
            "sampling.collective_repeats=6", "sampling.warmup=1", f"output_dir={tmp_path}"]
    done = subprocess.run([sys.executable, "-m", "predictor.app.cli", *args], env=cpu_env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = store.read_samples(tmp_path)
    assert Counter(rows["origin"]) == {"sampled": 4 * 6, origin_of(GAPS_S[0]): 4 * 2, origin_of(GAPS_S[1]): 4 * 2}
    [meta] = [store.read_run_metadata(f) for f in store.run_files(tmp_path)]
    assert meta["collective_gaps_s"] == list(GAPS_S)
    cfg = load_config(["hardware=local-cpu"])
    hw = section(cfg, "hardware", HardwareConfig)
    models = train(rows, hw, section(cfg, "regressor", RegressorConfig), n_jobs=1)
    assert models.manifest["samples"]["rows"] == 4 * 6  # the op model learns the reference gap's rows alone
    curve = models.manifest["adjustments"]["collective_gap"]["params"]
    assert curve["gaps_us"] == [500, 2000, 10000] and curve["ratios"][-1] == 1.0 and curve["sizes"] == 4
    models.save(tmp_path / "models")
    assert ModelSet.load(tmp_path / "models", hw).manifest["adjustments"]["collective_gap"]["params"] == curve


def test_a_damaged_curve_is_named_when_the_models_load(tmp_path):
    hw = section(load_config(["hardware=local-cpu"]), "hardware", HardwareConfig)
    ModelSet.load(models_dir() / hw.name, hw).save(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps({**manifest, "collective_gap": {"gaps_us": [500]}}))
    with pytest.raises(PrismError, match="collective_gap") as err:
        ModelSet.load(tmp_path, hw)
    assert err.value.field == "collective_gap"

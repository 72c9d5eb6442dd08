"""prism search: enumeration, filters, ranking, Pareto fronts, the screen against the composer."""
import json
import sys
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import predictor.analyses.search as search_module
from predictor.analyses.search import MIN_CP_TOKENS, enumerate_layouts, invalid_reason, pareto_front, screen, search
from predictor.app.cli import main
from predictor.app.config import load_config
from predictor.core.errors import PrismError
from predictor.core.profiles import load_hardware, load_model, section
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig
from predictor.engine.compose import compose
from predictor.latency.artifacts import trained_models
from predictor.latency.lookup import QuantileCache
from predictor.workload.decompose import decompose
from predictor.workload.memory import memory_per_gpu

# A small job: tiny's 2 layers and 4 heads keep the layouts few (tp=8 does not divide the
# heads: invalid); a 4,096-token sequence lets cp reach 4.
SMALL = ["model=tiny", "hardware=a100-sxm4-80gb", "gpus=16", "model.seq_length=4096",
         "parallel.global_batch_size=64", "top=5"]
A100 = load_hardware("a100-sxm4-80gb")


def _search(hardware=A100, **settings):
    """:func:`search` on the small job (SMALL, as the command line gives it)."""
    return search(replace(load_model("tiny"), seq_length=4096), hardware, 16,
                  base=ParallelConfig(global_batch_size=64), **{"top": 5, **settings})


@pytest.fixture(scope="module")
def small():
    return _search()


def test_enumeration_covers_exactly_the_layouts_of_the_gpu_count():
    cfg = load_config(SMALL)
    model = section(cfg, "model", ModelConfig)
    layouts = enumerate_layouts(model, 16, 8, 64)
    shapes = {(p.dp, p.tp, p.pp, p.cp) for p in layouts}
    # every 4-way factorisation of 16, found by brute force, that the search's axis rules allow
    expected = {(dp, tp, pp, cp) for dp in range(1, 17) for tp in range(1, 17) for pp in range(1, 17)
                for cp in range(1, 17) if dp * tp * pp * cp == 16 and 8 % tp == 0 and pp <= model.num_layers
                and cp & (cp - 1) == 0 and model.seq_length // cp >= MIN_CP_TOKENS}
    assert shapes == expected
    assert {cp for _, _, _, cp in shapes} == {1, 2, 4} and {tp for _, tp, _, _ in shapes} == {1, 2, 4, 8}
    for dp, tp, pp, cp in shapes:
        variants = [p for p in layouts if (p.dp, p.tp, p.pp, p.cp) == (dp, tp, pp, cp)]
        shardings = {p.sharding for p in variants}
        assert shardings == ({"none"} if dp * cp == 1 else {"none", "distributed_optimizer", "zero3"})
        assert len(variants) == 4 * 3 * len(shardings)  # micro-batch sizes x recompute x sharding
        assert all(p.sequence_parallel == (tp > 1) and p.global_batch_size == 64 for p in variants)


def test_interleaving_only_where_the_layers_split_evenly():
    model = section(load_config(["model=llama3-70b"]), "model", ModelConfig)  # 80 layers
    layouts = enumerate_layouts(model, 64, 8, 512)
    vpps = {}
    for p in layouts:
        vpps.setdefault(p.pp, set()).add(p.vpp)
    assert {pp: sorted(v) for pp, v in vpps.items() if pp in (1, 2, 16, 32)} == {
        1: [1], 2: [1, 2, 4, 5, 8, 10, 20, 40], 16: [1, 5], 32: [1]}
    assert all((p.schedule == "interleaved") == (p.vpp > 1) for p in layouts)


def test_counts_add_up_and_invalid_layouts_are_counted_by_field(small):
    r = small
    c = r.counts
    assert c["enumerated"] == c["invalid"] + c["do_not_fit"] + c["ranked"] == 696
    assert c["invalid_by_reason"]["parallel.tp"] > 0  # tp=8 does not divide tiny's 4 heads
    assert sum(c["invalid_by_reason"].values()) == c["invalid"] and len(r.layouts) == c["ranked"]


def test_layouts_that_do_not_fit_are_dropped_and_counted():
    cfg = load_config(SMALL)
    model, hw = section(cfg, "model", ModelConfig), section(cfg, "hardware", HardwareConfig)
    valid = [p for p in enumerate_layouts(model, 16, 8, 64) if invalid_reason(model, p, 16) is None]
    gib = np.array([memory_per_gpu(model, p).total_gib for p in valid])
    capacity = float(np.median(gib))
    r = _search(replace(A100, memory=replace(A100.memory, capacity_gib=capacity)))
    assert r.counts["do_not_fit"] == int((gib > capacity).sum()) > 0
    assert r.counts["ranked"] == int((gib <= capacity).sum())
    assert max(x["memory_gib"] for x in r.layouts) <= capacity < hw.memory.capacity_gib
    with pytest.raises(PrismError, match=rf"none of the .* fits .*the smallest needs {gib.min():.1f} GiB") as error:
        _search(replace(A100, memory=replace(A100.memory, capacity_gib=gib.min() / 2)))
    assert "smaller parallel.global_batch_size" in str(error.value)  # the activations are most of it: a batch helps
    with pytest.raises(PrismError, match="states\\); use more GPUs$"):  # the weights alone do not fit
        _search(replace(A100, memory=replace(A100.memory, capacity_gib=1e-4)))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=40))
def test_pareto_front_is_non_dominated(points):
    x, y = np.array(points, dtype=float).T
    front = pareto_front(x, y)

    def dominates(a, b):
        return x[a] <= x[b] and y[a] <= y[b] and (x[a] < x[b] or y[a] < y[b])

    assert all(not dominates(j, i) for i in front for j in range(len(x)))
    for j in set(range(len(x))) - set(front):  # everything else is dominated by, or equal to, a front point
        assert any(dominates(i, j) or (x[i], y[i]) == (x[j], y[j]) for i in front)
    assert list(x[front]) == sorted(x[front]) and len(set(zip(x[front], y[front]))) == len(front)


def test_fronts_hold_on_the_reported_figures(small):
    r = small
    rows = r.layouts
    for front, (a, b) in ((r.front_memory, ("memory_gib", "p50_s")), (r.front_risk, ("p50_s", "risk"))):
        for i in front:
            assert not any(o[a] <= rows[i][a] and o[b] <= rows[i][b] and (o[a] < rows[i][a] or o[b] < rows[i][b])
                           for o in rows)
    assert rows[0]["rank"] == 1 and 0 in r.front_memory  # the fastest layout is on the memory front


@pytest.mark.parametrize("rank_by", ["p50", "p95", "mean"])
def test_ranking_is_the_sort_order_of_the_chosen_statistic(rank_by):
    r = _search(rank_by=rank_by)
    values = [x[f"{rank_by}_s"] for x in r.layouts]
    assert values == sorted(values) and [x["rank"] for x in r.layouts] == list(range(1, len(values) + 1))
    assert all(x["composed"] for x in r.layouts[:r.top])
    assert all(x["p50_s"] <= x["p95_s"] and x["risk"] == pytest.approx(x["p95_s"] / x["p50_s"]) for x in r.layouts)


def test_bad_settings_name_the_key():
    with pytest.raises(PrismError, match="rank_by=p42"):
        _search(rank_by="p42")
    with pytest.raises(PrismError, match="top=0"):
        _search(top=0)
    with pytest.raises(PrismError, match="gpus="):
        search(load_model("tiny"), A100, None)


def test_json_parses_and_plot_is_written(tmp_path, capsys):
    png = tmp_path / "search.png"
    assert main(["search", *SMALL, f"plot={png}", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["counts"]["ranked"] == len(out["layouts"]) and len(out["top_layouts"]) == 5
    assert out["front_memory"][0]["memory_gib"] == min(x["memory_gib"] for x in out["layouts"])
    assert out["plot"] == str(png) and png.stat().st_size > 0 and list(tmp_path.iterdir()) == [png]
    assert main(["search", *SMALL[:3], "rank_by=p42"]) == 2
    assert "rank_by" in capsys.readouterr().err


def test_decompose_reads_neither_vpp_nor_schedule():
    """search decomposes once for every vpp of a layout."""
    cfg = load_config(["model=llama3-8b", "hardware=h100-sxm"])
    model, hw = section(cfg, "model", ModelConfig), section(cfg, "hardware", HardwareConfig)
    par = ParallelConfig(dp=2, tp=2, pp=4, global_batch_size=64, sequence_parallel=True, sharding="zero3")
    plain = decompose(model, par, hw)
    assert decompose(model, replace(par, vpp=4, schedule="interleaved"), hw).stages == plain.stages


def test_screen_agrees_with_the_composer():
    """The screen's rules are compose's: its median and p95 match to about a percent, over
    pipelines, interleaving, context parallelism, ZeRO-3 and overlapped TP collectives."""
    cfg = load_config(["model=llama3-8b", "hardware=a100-sxm4-80gb"])
    model, hw = section(cfg, "model", ModelConfig), section(cfg, "hardware", HardwareConfig)
    models = trained_models(hw)
    cache = QuantileCache(models, hw)
    base = ParallelConfig(global_batch_size=256, sequence_parallel=True)
    layouts = [replace(base, dp=8, tp=8), replace(base, dp=4, tp=4, pp=4, micro_batch_size=2),
               replace(base, dp=4, tp=4, pp=4, vpp=2, schedule="interleaved", sharding="distributed_optimizer"),
               replace(base, dp=4, tp=2, pp=2, cp=4, sharding="zero3", recompute="selective"),
               replace(base, dp=8, tp=4, pp=2, overlap_tp_comm=True, recompute="full")]
    works = [decompose(model, p, hw, 64) for p in layouts]
    screened = screen(works, models, cache, draws=2000)
    for work, draws in zip(works, screened):
        exact = compose(work, models, draws=2000, cache=cache).draws
        np.testing.assert_allclose(np.quantile(draws, [0.5, 0.95]), np.quantile(exact, [0.5, 0.95]), rtol=0.015)


def test_a_layouts_screened_draws_do_not_depend_on_the_layouts_beside_it():
    """Each call and stage position draws from its own stream: screened alone or among
    others, a layout gets the same step times (the search screens its parts apart)."""
    model, hw = load_model("llama3-8b"), A100
    models = trained_models(hw)
    base = ParallelConfig(global_batch_size=256, sequence_parallel=True)
    works = [decompose(model, replace(base, dp=4, tp=4, pp=4), hw, 64),
             decompose(model, replace(base, dp=8, tp=8), hw, 64),
             decompose(model, replace(base, dp=2, tp=8, pp=4, micro_batch_size=2), hw, 64)]
    together = screen(works, models, QuantileCache(models, hw), draws=64, seed=3)
    for work, draws in zip(works, together):
        np.testing.assert_allclose(screen([work], models, QuantileCache(models, hw), draws=64, seed=3)[0], draws,
                                   rtol=1e-12)
    assert not np.allclose(screen(works[:1], models, QuantileCache(models, hw), draws=64, seed=4)[0], together[0])


@pytest.mark.skipif(sys.platform != "linux", reason="the search forks only on Linux")
def test_search_in_worker_processes_ranks_as_in_one(monkeypatch, small):
    """Parts screened in forked workers come back to the very ranking of one process."""
    monkeypatch.setattr(search_module, "PARALLEL_FROM", 1)
    monkeypatch.setattr(search_module, "_cpus", lambda: 2)
    forked = _search()
    assert forked.counts == small.counts
    assert [(d["dp"], d["tp"], d["pp"], d["cp"], d["vpp"], d["mbs"], d["recompute"], d["sharding"])
            for d in forked.layouts] == [(d["dp"], d["tp"], d["pp"], d["cp"], d["vpp"], d["mbs"], d["recompute"],
                                          d["sharding"]) for d in small.layouts]
    np.testing.assert_allclose([d["p50_s"] for d in forked.layouts], [d["p50_s"] for d in small.layouts],
                               rtol=1e-9)


@pytest.mark.slow
def test_the_top_layout_is_what_prism_predict_says(capsys):
    """The search's figures for its best layout are ``prism predict``'s for that layout:
    one engine (a pipeline of 8 stages, interleaved, with a sharded optimizer here)."""
    job = ["model=llama3-70b", "hardware=h100-sxm", "gpus=64"]
    assert main(["search", *job, "top=1", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    best = found["top_layouts"][0]
    assert best["composed"] and best["pp"] > 1 and best["vpp"] > 1
    layout = {"dp": best["dp"], "tp": best["tp"], "pp": best["pp"], "cp": best["cp"], "vpp": best["vpp"],
              "schedule": "interleaved", "micro_batch_size": best["mbs"], "recompute": best["recompute"],
              "sharding": best["sharding"], "sequence_parallel": str(best["tp"] > 1).lower(),
              "global_batch_size": found["global_batch_size"]}
    assert main(["predict", *job, *(f"parallel.{k}={v}" for k, v in layout.items()), "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)
    assert predicted["step_time_s"]["p50"] == pytest.approx(best["p50_s"], rel=0.005)

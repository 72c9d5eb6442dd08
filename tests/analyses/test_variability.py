"""prism variability: slowdown versus scale, variance attribution, slow nodes, goodput;
predict's confidence; the order-statistic shortcut against drawing every GPU."""
import json
from dataclasses import replace

import pytest

from predictor.analyses.predict import predict
from predictor.analyses.variability import AnalysisConfig, shortcut_check, time_to_train, variability
from predictor.app.cli import main
from predictor.core.errors import PrismError
from predictor.core.layout import resolve_layout
from predictor.core.profiles import load_hardware, load_model
from predictor.core.specs import ParallelConfig
from predictor.engine.compose import compose
from predictor.latency.artifacts import trained_models
from predictor.latency.lookup import QuantileCache
from predictor.workload.decompose import decompose

MODEL, H100, TP8_PP8 = load_model("llama3-70b"), load_hardware("h100-sxm"), ParallelConfig(tp=8, pp=8)
FAST = {"draws": 1000, "runs": 1000}
# the same job and settings on the command line
LAYOUT = ["model=llama3-70b", "hardware=h100-sxm", "parallel.tp=8", "parallel.pp=8"]
FAST_CLI = ["analysis.draws=1000", "analysis.runs=1000"]


@pytest.fixture(scope="module")
def report():
    return variability(MODEL, H100, TP8_PP8, 512, settings=AnalysisConfig(**FAST, scales=[64, 512, 4096, 65536]))


def _work(gpus):
    return decompose(MODEL, resolve_layout(TP8_PP8, gpus), H100, gpus)


def test_slowdown_probability_grows_with_scale(report):
    assert [r["gpus"] for r in report.scales] == [64, 512, 4096, 65536]
    for x in ("5%", "10%"):
        p = [r["p_slowdown"][x] for r in report.scales]
        assert p == sorted(p), x
    for x in ("5%", "10%"):
        assert report.scales[-1]["p_slowdown"][x] > report.scales[0]["p_slowdown"][x], x
    # a 20 % slowdown is rare (none or a few draws in 1,000): it may not fall with scale
    assert report.scales[-1]["p_slowdown"]["20%"] >= report.scales[0]["p_slowdown"]["20%"]
    assert all(r["nominal_s"] < r["p50_s"] < r["p95_s"] for r in report.scales)


def test_attribution_shares_sum_to_one_and_are_not_negative(report):
    for part in ("ops", "components"):
        shares = [r["share"] for r in report.attribution[part]]
        assert sum(shares) == pytest.approx(1.0)
        assert min(shares) >= 0
    # The largest share goes to the bulk of the step: the GEMMs, or the tensor-parallel
    # all-reduces (four per layer and pass, modelled inside the node from nccl-tests), or
    # ops resting on the roofline prior, whose error is systematic (one draw for all of them).
    work = _work(512)
    basis = compose(work, trained_models(H100), draws=10).basis
    top = report.attribution["ops"][0]["name"]
    assert top.split("/")[0] in ("gemm", "all_reduce") or basis[top] == "roofline prior", (top, basis[top])


def test_slow_nodes_spread_over_stages_are_not_faster_than_all_in_one_stage(report):
    p50 = {r["placement"]: r["p50_s"] for r in report.placements}
    assert p50["spread over stages and dp replicas"] >= p50["all in stage 0 (first)"]
    assert all(v >= p50["no slow nodes"] for v in p50.values())
    # which dp replica holds them does not matter: the gradient reduction waits for the slowest
    assert p50["spread over stages and dp replicas"] == p50["spread over stages, same dp replica"]
    assert report.placement_spread >= 1


def test_a_node_is_one_tp_group_of_one_stage():
    work = _work(512)  # 64 nodes, 8 per stage
    assert work.mesh.gpus_per_stage_on([0, 1, 8]) == (16, 8, 0, 0, 0, 0, 0, 0)


def test_goodput_falls_below_one_only_with_interruptions():
    step = compose(_work(512), None, draws=500).draws
    ttt = time_to_train(step, 1e5, H100, 512, runs=500, seed=0)
    assert ttt["goodput"]["p50"] < 1 and ttt["interruptions"]["p50"] > 0
    assert ttt["days"]["p50"] > ttt["productive_days"]["p50"]
    calm = replace(H100, variability=replace(H100.variability, interruptions_per_gpu_day=0.0))
    ttt = time_to_train(step, 1e5, calm, 512, runs=500, seed=0)
    assert ttt["goodput"] == {"p5": 1.0, "p50": 1.0, "p95": 1.0}
    assert ttt["days"] == ttt["productive_days"]


def test_failures_are_counted_over_the_run_s_wall_time_with_its_restarts_and_redone_work():
    """At 1M H100s a failure comes every 2.9 minutes: 9 interruptions in 4.1 hours had been
    printed (failures drawn over productive time alone, each losing up to 30 minutes)."""
    from predictor.analyses.variability import progress_note, wall_time_stretch
    rate = H100.variability.interruptions_per_gpu_day  # per GPU-day
    tau, restart = H100.variability.checkpoint_interval_min, H100.variability.restart_cost_min
    stretch, per_failure = wall_time_stretch(rate * 64, tau, restart)  # rare failures: the familiar sum
    assert stretch == pytest.approx(1 + rate * 64 / 1440 * (restart + tau / 2), rel=1e-3)
    assert per_failure == pytest.approx(restart + tau / 2, rel=1e-2)
    step = compose(_work(512), None, draws=500).draws
    for gpus in (131_072, 1_048_576):
        ttt = time_to_train(step, 1e5, H100, gpus, runs=500, seed=0)
        # interruptions come at the hardware's rate over the whole run, not over its productive part
        assert ttt["interruptions"]["p50"] == pytest.approx(rate * gpus * ttt["days"]["p50"], rel=0.05)
        assert ttt["days"]["p50"] > 2 * ttt["productive_days"]["p50"]
        assert "checkpoint more often" in progress_note(H100, gpus)
    assert progress_note(H100, 512) is None


def test_confidence_is_at_least_the_median():
    p = predict(MODEL, H100, TP8_PP8, 512, confidence=0.95, draws=500)
    assert p.confidence["level"] == 0.95
    assert p.confidence["step_time_s"] >= p.step_time_s["p50"]
    assert p.confidence["time_to_train_days"] >= p.time_to_train_days["p50"]
    assert predict(MODEL, H100, TP8_PP8, 512, draws=100).confidence is None


@pytest.mark.parametrize("setting, field", [
    ({"slow_nodes": 9}, "analysis.slow_nodes=9"),
    ({"slow_factor": -1.1}, "analysis.slow_factor"),
    ({"thresholds": []}, "analysis.thresholds"),
])
def test_bad_analysis_settings_name_the_field(setting, field):
    with pytest.raises(PrismError, match=field) as err:
        variability(MODEL, H100, TP8_PP8, 64, settings=AnalysisConfig(**FAST, **setting))
    assert err.value.field == field.partition("=")[0]


def test_bad_confidence_names_the_field():
    with pytest.raises(PrismError, match="confidence=1.5"):
        predict(MODEL, H100, TP8_PP8, 64, confidence=1.5, draws=100)


def test_one_op_residual_can_be_held_and_a_wrong_one_is_named():
    work, models = _work(64), trained_models(H100)  # GEMMs rest on models: they have residuals
    shared = ("temporal", "spatial", "regime")  # held too, so that the residuals' own variance shows
    full = compose(work, models, draws=500, hold=shared).draws.var()
    assert compose(work, models, draws=500, hold=(*shared, "residual:gemm/bwd")).draws.var() < full
    assert compose(work, models, draws=500, hold=(*shared, "residual:gemm")).draws.var() < full
    with pytest.raises(PrismError, match="residual:conv2d names no op"):
        compose(work, models, draws=10, hold=("residual:conv2d",))


@pytest.mark.parametrize("gpus", [64, 512])
def test_shortcut_agrees_with_drawing_every_gpu(gpus):
    c = shortcut_check(_work(gpus), None, QuantileCache(None, H100), AnalysisConfig(draws=3000), seed=0)
    assert abs(c["p50_rel_diff"]) < 0.02 and abs(c["p95_rel_diff"]) < 0.02
    assert max(map(abs, c["p_slowdown_diff"].values())) < 0.02


def test_cli_interface_writes_json_and_one_plot(tmp_path, capsys):
    png = tmp_path / "figs" / "v"
    rc = main(["variability", *LAYOUT, "gpus=65536", *FAST_CLI, f"plot={png}", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpus"] == 65536 and out["scales"][-1]["gpus"] == 65536
    assert {"attribution", "placements", "time_to_train", "nominal_s"} <= set(out)
    assert out["plot"] == str(png.with_suffix(".png"))
    assert png.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in png.parent.iterdir()] == ["v.png"]  # one figure, the temporary file renamed


def test_cli_draws_no_plot_unless_asked_and_refuses_out(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["variability", *LAYOUT, "gpus=64", *FAST_CLI, "analysis.scales=[64]"]) == 0
    assert "plot    none (plot=variability.png" in capsys.readouterr().out and list(tmp_path.iterdir()) == []
    assert main(["variability", *LAYOUT, "gpus=64", *FAST_CLI, "out=runs/v"]) == 2  # one way to ask: plot=
    assert "out=runs/v" in capsys.readouterr().err and list(tmp_path.iterdir()) == []
    assert main(["variability", *LAYOUT, "gpus=64", *FAST_CLI, "plot=v.svg"]) == 2
    assert "plot=v.svg" in capsys.readouterr().err

"""`prism predict` and `prism predict-batch` end to end on the shipped models."""
import json
import subprocess
import sys

import pandas as pd
import pytest

from predictor.analyses.batch import predict_table
from predictor.analyses.predict import predict
from predictor.core.errors import PrismError
from predictor.core.profiles import load_hardware, load_model
from predictor.core.specs import ParallelConfig


def _prism(*args):
    return subprocess.run([sys.executable, "-m", "predictor.app.cli", *args], capture_output=True, text=True,
                          timeout=120)


def test_predict_reports_the_design_fields():
    out = _prism("predict", "model=gpt3-2.7b", "hardware=a100-sxm4-80gb", "gpus=16", "parallel.tp=4",
                 "parallel.pp=2", "target_step_s=100", "--json")
    assert out.returncode == 0, out.stderr
    p = json.loads(out.stdout)
    assert p["layout"]["dp"] == 2 and p["gpus"] == 16
    s = p["step_time_s"]
    assert s["p5"] < s["p50"] < s["p95"] < s["p99"]
    assert 0 < p["mfu"] < 1 and p["tokens_per_s"] > 0 and p["fits"]
    m = p["memory_gib"]  # the parts shown add up to the total
    assert m["total"] == pytest.approx(sum(m[k] for k in ("weights", "gradients", "optimizer", "activations",
                                                          "workspace")))
    assert p["prob_below"]["p"] == 1.0
    ttt = p["time_to_train_days"]
    assert ttt["p5"] <= ttt["p50"] <= ttt["p95"]
    # the run's mean step over the composed median, leaned as far as the runs like it landed
    lean = p["predictive"]["median_step_s"]["p50"] / s["p50"]
    assert p["train_step_s"] == pytest.approx(s["mean"] * lean, rel=0.05)
    # tokens/s and the time to train rest on that one step (issue 55): their product is the budget
    assert ttt["p50"] == pytest.approx(p["train_tokens"] / p["tokens_per_s"] / 86400, rel=1e-6)
    # per-step jitter averages out over a run; the doubt about the median does not: the
    # time-to-train band is about as wide as the median step's 90% predictive interval
    lo, hi = p["predictive"]["interval_s"]["90%"]
    assert ttt["p95"] / ttt["p5"] == pytest.approx(hi / lo, rel=0.25)
    assert len(p["cdf"]["t_s"]) == 101 and p["cost_usd"]["p50"] > 0
    assert any(src.startswith("models/a100") for src in p["basis"])
    # the Python API on typed specs is the command line's prediction
    api = predict(load_model("gpt3-2.7b"), load_hardware("a100-sxm4-80gb"), ParallelConfig(tp=4, pp=2), gpus=16,
                  target_step_s=100)
    assert json.loads(json.dumps(api.to_dict())) | {"plot": None} == p  # the command line adds where it drew


@pytest.mark.parametrize("setting, field", [({"gpus": 0}, "gpus"), ({"gpus": "512"}, "gpus"),
                                            ({"train_tokens": 0}, "train_tokens"),
                                            ({"confidence": 1.0}, "confidence")])
def test_predict_names_a_bad_setting(setting, field):
    with pytest.raises(PrismError, match=f"^{field}=") as err:
        predict(load_model("gpt3-2.7b"), load_hardware("a100-sxm4-80gb"), ParallelConfig(tp=4), **setting)
    assert err.value.field == field


def test_predict_names_a_bad_layout():
    out = _prism("predict", "model=gpt3-2.7b", "parallel.tp=3")
    assert out.returncode == 2 and "parallel.tp" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = _prism("predict", "model=gpt3-2.7b", "gpus=10", "parallel.tp=4")
    assert out.returncode == 2 and "gpus=10" in out.stderr


def test_predict_batch_adds_the_columns(reference_data, tmp_path):
    table = pd.read_csv(reference_data / "e2e" / "e2e_training_visible.csv")
    rows = table[table.set_id == "vtrain_multi"].head(4)
    src = tmp_path / "in.csv"
    rows.to_csv(src, index=False)
    out = _prism("predict-batch", str(src), f"out={tmp_path / 'out.csv'}")
    assert out.returncode == 0, out.stderr
    result = pd.read_csv(tmp_path / "out.csv")
    assert list(result.columns[:len(rows.columns)]) == list(rows.columns)
    for c in ("pred_iter_time_s_p50", "pred_iter_time_s_p5", "pred_iter_time_s_p95", "pred_mem_gib", "pred_status"):
        assert c in result
    assert (result.pred_status == "ok").all()
    assert ((result.pred_iter_time_s_p50 - result.iter_time_s).abs() / result.iter_time_s < 0.5).all()


def test_predict_batch_reports_errors_per_row(reference_data):
    table = pd.read_csv(reference_data / "e2e" / "e2e_training_visible.csv").head(2).copy()
    table.loc[table.index[0], "gpu"] = "Voodoo5"
    result = predict_table(table, draws=100)
    assert "Voodoo5" in result.pred_status.iloc[0] and result.pred_status.iloc[1] == "ok"


def test_predict_draws_its_plot_when_asked(tmp_path, capsys):
    from predictor.app.cli import main
    png = tmp_path / "step"
    assert main(["predict", "model=gpt3-1.3b", "hardware=a100-sxm4-80gb", "gpus=8", "target_step_s=1",
                 f"plot={png}", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plot"] == str(png.with_suffix(".png"))
    assert png.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    assert main(["predict", "model=gpt3-1.3b", "hardware=a100-sxm4-80gb", "gpus=8", "plot=step.svg"]) == 2
    assert "plot=step.svg" in capsys.readouterr().err


def test_predict_says_how_uneven_layers_split_and_that_sequence_parallelism_is_off_at_tp1():
    model, hw = load_model("gpt3-13b"), load_hardware("a100-sxm4-80gb")  # 40 layers
    interleaved = predict(model, hw, ParallelConfig(tp=4, pp=2, vpp=3, schedule="interleaved"), 64, draws=200)
    assert any("pp·vpp = 6 model chunks" in n and "embedding" in n and "20, 20" in n for n in interleaved.notes)
    three = predict(model, hw, ParallelConfig(tp=4, pp=3, global_batch_size=48), 48, draws=200)
    assert any("13, 14, 13" in n for n in three.notes)
    even = predict(model, hw, ParallelConfig(tp=8, pp=2, global_batch_size=32), 64, draws=200)
    assert not any("model chunks" in n for n in even.notes)
    alone = predict(model, hw, ParallelConfig(tp=1, sequence_parallel=True, global_batch_size=256), 64, draws=200)
    plain = predict(model, hw, ParallelConfig(tp=1, global_batch_size=256), 64, draws=200)
    assert alone.layout["sequence_parallel"] is False and any("off at tp=1" in n for n in alone.notes)
    assert alone.step_time_s == plain.step_time_s  # it splits nothing: the same prediction


def test_time_to_train_reads_in_the_unit_its_median_needs():
    """65,536 GPUs train a trillion tokens in hours: "0.0 days" said nothing."""
    from predictor.app.render import duration, duration_band
    assert duration(20.1) == "20.1 days"
    assert duration(0.4) == "9.6 hours"
    assert duration(30 / 1440) == "30.0 minutes"
    assert duration(5 / 86400) == "5.0 s"
    assert duration_band({"p5": 0.25, "p50": 0.5, "p95": 1.5}) == "12.0 hours (90% band 6.0-36.0)"

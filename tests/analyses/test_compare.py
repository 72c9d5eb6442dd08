"""prism compare: one job over several hardware profiles, side by side (GitHub issue 7)."""
import json

import pytest

from predictor.analyses.compare import compare, gpu_profiles
from predictor.analyses.predict import predict
from predictor.app.cli import main, split_hardware
from predictor.app.plots import plot_path
from predictor.app.render import format_comparison
from predictor.core.errors import PrismError
from predictor.core.profiles import group_options, load_hardware, load_model
from predictor.core.specs import ParallelConfig

MODEL = load_model("gpt3-1.3b")
LAYOUT = ParallelConfig(tp=2, pp=2)
FOUR = ["a100-sxm4-80gb", "h100-sxm", "gh200", "b200"]
DRAWS = 500


@pytest.fixture(scope="module")
def four():
    return compare(MODEL, FOUR, LAYOUT, gpus=64, draws=DRAWS)


def test_one_column_per_profile_with_ordered_bands(four):
    assert [r.hardware for r in four.results] == FOUR
    assert four.model == "gpt3-1.3b" and four.gpus == 64 and four.layout["dp"] == 16
    for r in four.results:
        for band in (r.step_time_s, r.time_to_train_days, r.gpu_hours, r.cost_usd, r.energy_mwh):
            assert 0 < band["p5"] <= band["p50"] <= band["p95"], r.hardware
        assert r.tier in ("measured samples", "microbenchmarks", "spec-only prior") and r.fits
    assert four.results[0].speedup == 1.0
    table = format_comparison(four)
    assert all(name in table for name in FOUR) and "node CPUs and network excluded, cooling too" in table


def test_each_column_is_predict_and_energy_is_gpu_hours_times_power(four):
    h100 = four.results[1]
    p = predict(MODEL, load_hardware("h100-sxm"), LAYOUT, gpus=64, draws=DRAWS)
    assert h100.step_time_s["p50"] == p.step_time_s["p50"] and h100.tier == p.tier
    assert h100.gpu_hours["p50"] == pytest.approx(p.gpu_hours) and h100.cost_usd == p.cost_usd
    assert h100.energy_mwh["p50"] == pytest.approx(p.gpu_hours * 700 / 1e6)  # h100-sxm: power_w 700
    # the speed-up is of the job's median step, prism predict's (issue 55)
    assert h100.speedup == pytest.approx(four.results[0].median_step_s / p.predictive["median_step_s"]["p50"])
    # pue multiplies the energy and nothing else
    again = compare(MODEL, [load_hardware("h100-sxm")], LAYOUT, gpus=64, draws=DRAWS, pue=1.25).results[0]
    assert again.energy_mwh["p50"] == pytest.approx(1.25 * h100.energy_mwh["p50"])
    assert again.cost_usd == h100.cost_usd


def test_a_profile_without_price_or_power_has_none():
    c = compare(load_model("tiny"), ["local-cpu", "a100-sxm4-80gb"], ParallelConfig(dp=2), draws=DRAWS)
    cpu, a100 = c.results
    assert cpu.cost_usd is None and cpu.energy_mwh is None and cpu.price_per_gpu_hour is None
    assert a100.cost_usd["p50"] > 0 and a100.energy_mwh["p50"] > 0
    table = format_comparison(c)
    assert "no price" in table and "no power_w" in table


def test_bad_hardware_and_pue_name_the_field():
    with pytest.raises(PrismError, match=r"^hardware=\[h100-sxm,h300\]: no conf/hardware/h300\.yaml") as err:
        compare(MODEL, ["h100-sxm", "h300"], LAYOUT, gpus=64)
    assert all(name in str(err.value) for name in group_options("hardware"))
    with pytest.raises(PrismError, match=r"^hardware=\[\]"):
        compare(MODEL, [], LAYOUT, gpus=64)
    with pytest.raises(PrismError, match=r"^pue=0.8"):
        compare(MODEL, ["h100-sxm"], LAYOUT, gpus=64, draws=DRAWS, pue=0.8)


def test_hardware_list_is_parsed_before_hydra():
    assert split_hardware(["model=tiny", "hardware=[a100-sxm4-80gb, h100-sxm]", "gpus=8"]) == (
        ["a100-sxm4-80gb", "h100-sxm"], ["model=tiny", "gpus=8"])
    assert split_hardware(["hardware=b200,gh200", "hardware=b200"])[0] == ["b200", "gh200"]
    assert split_hardware(["hardware=h100-sxm"])[0] == ["h100-sxm"]
    assert split_hardware(["hardware=[h100-sxm,h100-sxm]"])[0] == ["h100-sxm"]  # was both, then refused as twice
    assert split_hardware(["model=tiny", "hardware.power_w=500"]) == (None, ["model=tiny", "hardware.power_w=500"])
    assert "local-cpu" not in gpu_profiles() and set(FOUR) <= set(gpu_profiles())
    for unclosed in ("hardware=[a100-sxm4-80gb,h100-sxm", "hardware=a100-sxm4-80gb,h100-sxm]"):
        with pytest.raises(PrismError, match="unclosed bracket") as err:
            split_hardware([unclosed])
        assert err.value.field == "hardware"


def test_plot_path_checks_the_suffix(tmp_path):
    assert plot_path(None) is None and plot_path("runs/cmp") == plot_path("runs/cmp.png")
    with pytest.raises(PrismError, match="^plot="):
        plot_path("cmp.svg")
    for bare in (".png", f"{tmp_path}/.PNG"):  # a suffix alone once wrote ".png.png"
        with pytest.raises(PrismError, match="a suffix with no name; give the file a name, e.g. plot=.*step.png"):
            plot_path(bare)


def test_cli_json_parses_and_the_plot_is_written(tmp_path, capsys):
    png = tmp_path / "figs" / "compare.png"
    code = main(["compare", "model=tiny", "parallel.dp=2", "hardware=[local-cpu,a100-sxm4-80gb]", f"plot={png}",
                 "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["hardware"] for r in out["results"]] == ["local-cpu", "a100-sxm4-80gb"]
    assert out["results"][0]["cost_usd"] is None and out["plot"] == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in png.parent.iterdir()] == ["compare.png"]  # the temporary file was renamed


def test_cli_names_an_unknown_profile(capsys):
    assert main(["compare", "model=tiny", "hardware=[h100-sxm,nope]"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "hardware=[h100-sxm,nope]" in err and "h200" in err

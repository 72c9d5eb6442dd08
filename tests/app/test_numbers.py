"""The fourth new-user probe, numbers: draws past memory, integers past a float, booleans
and text taken as numbers, an energy overhead of 1e308, a GPU of no SMs, models a million
wide, and figures printed as 0 or run together. Each bad value: one line naming the field,
exit code 2; each odd but valid figure printed readably."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from predictor.analyses.compare import check_hardware, check_pue, compare
from predictor.analyses.predict import predict
from predictor.analyses.variability import AnalysisConfig, check_analysis, variability
from predictor.app.cli import main
from predictor.app.render import compact_number, format_comparison, format_prediction, format_variability
from predictor.core.errors import PrismError
from predictor.core.profiles import group_options, load_hardware, load_model
from predictor.core.specs import MAX_DRAWS, ParallelConfig, check_number

MODEL, A100 = load_model("gpt3-13b"), load_hardware("a100-sxm4-80gb")
TP8 = ParallelConfig(tp=8)
JOB = ["model=gpt3-13b", "hardware=a100-sxm4-80gb", "gpus=64", "parallel.tp=8"]
HUGE = 10 ** 400


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _refused(call, field: str, says: str = "") -> str:
    with pytest.raises(PrismError) as error:
        call()
    assert error.value.field == field and says in str(error.value), str(error.value)
    return str(error.value)


def test_draws_and_runs_are_capped_where_predict_batch_caps_them():
    assert MAX_DRAWS == 1_000_000  # prism predict-batch's draws=N
    _refused(lambda: predict(MODEL, A100, TP8, 64, draws=10 ** 12), "draws", "from 1 to 1,000,000")  # was MemoryError
    _refused(lambda: check_analysis(AnalysisConfig(draws=MAX_DRAWS + 1)), "analysis.draws")
    _refused(lambda: check_analysis(AnalysisConfig(runs=MAX_DRAWS + 1)), "analysis.runs")
    _refused(lambda: check_analysis(AnalysisConfig(draws=99)), "analysis.draws", "from 100")
    assert check_analysis(AnalysisConfig(draws=MAX_DRAWS, runs=MAX_DRAWS)).runs == MAX_DRAWS


def test_an_integer_past_a_float_is_refused_not_an_overflow():
    # each was OverflowError: int too large to convert to float
    said = _refused(lambda: predict(MODEL, A100, TP8, 64, train_tokens=HUGE, draws=100), "train_tokens")
    assert said == "train_tokens=1.000e+400: must be a positive finite number within a float's range"
    _refused(lambda: predict(MODEL, A100, TP8, 64, confidence=HUGE, draws=100), "confidence", "1.000e+400")
    _refused(lambda: compare(MODEL, ["a100-sxm4-80gb"], TP8, 64, pue=HUGE, draws=100), "pue", "1.000e+400")
    _refused(lambda: replace(A100, price_per_gpu_hour=HUGE), "hardware.price_per_gpu_hour", "1.000e+400")
    _refused(lambda: check_number("x", 10 ** 5000), "x", "1.000e+5000")  # repr() itself refuses its 5001 digits
    check_number("x", 10 ** 300)  # within a float's range


@pytest.mark.parametrize("call, field", [
    (lambda: predict(MODEL, A100, TP8, 64, train_tokens=True, draws=100), "train_tokens"),  # was 1 token
    (lambda: predict(MODEL, A100, TP8, 64, confidence=True, draws=100), "confidence"),
    (lambda: predict(MODEL, A100, TP8, 64, target_step_s=True, draws=100), "target_step_s"),
    (lambda: predict(MODEL, A100, TP8, 64, draws=True), "draws"),
    (lambda: compare(MODEL, ["a100-sxm4-80gb"], TP8, 64, pue=True, draws=100), "pue"),  # was a pue of 1.0
])
def test_a_boolean_is_no_number(call, field):
    assert "not true or false" in _refused(call, field)


@pytest.mark.parametrize("call, field", [
    # train_tokens, confidence and pue were read as numbers while target_step_s and draws were refused
    (lambda: predict(MODEL, A100, TP8, 64, train_tokens="1e12", draws=100), "train_tokens"),
    (lambda: predict(MODEL, A100, TP8, 64, train_tokens=" 1e12 ", draws=100), "train_tokens"),
    (lambda: predict(MODEL, A100, TP8, 64, train_tokens="1_000_000", draws=100), "train_tokens"),
    (lambda: predict(MODEL, A100, TP8, 64, confidence="0.9", draws=100), "confidence"),
    (lambda: predict(MODEL, A100, TP8, 64, target_step_s="1", draws=100), "target_step_s"),
    (lambda: predict(MODEL, A100, TP8, 64, draws="200"), "draws"),
    (lambda: compare(MODEL, ["a100-sxm4-80gb"], TP8, 64, pue="1.2", draws=100), "pue"),
    (lambda: variability(MODEL, A100, TP8, 64, train_tokens="1e12"), "train_tokens"),
])
def test_the_api_takes_numbers_not_text(call, field):
    assert "not text; pass a number" in _refused(call, field)


def test_the_command_line_s_typed_numbers_still_pass(capsys):
    assert main(["predict", *JOB, "train_tokens=1_000_000", "confidence=0.9", "target_step_s=1", "--json"]) == 0
    assert main(["compare", *JOB, "hardware=[a100-sxm4-80gb]", "pue=3", "--json"]) == 0
    capsys.readouterr()
    assert check_pue(1) == 1.0 and check_pue(3.0) == 3.0
    _refused(lambda: check_pue(3.01), "pue", "from 1 to 3")


def test_hardware_is_a_list_or_generator_not_a_dict_or_a_set():
    # the dict's keys were compared, its values dropped without a word
    _refused(lambda: compare(MODEL, {"a100-sxm4-80gb": 1}, TP8, 64, draws=100), "hardware", "a list of profiles")
    _refused(lambda: check_hardware({"a100-sxm4-80gb", "h100-sxm"}), "hardware")  # no order to compare in
    assert check_hardware(("a100-sxm4-80gb", "h100-sxm")) == ["a100-sxm4-80gb", "h100-sxm"]


def test_a_gpu_has_sms_and_a_cpu_none():
    h100 = load_hardware("h100-sxm")
    _refused(lambda: replace(h100, device=replace(h100.device, sms=0)), "hardware.device.sms", "132 on an H100 SXM")
    assert load_hardware("local-cpu").device.sms == 0


def test_each_model_size_has_a_typo_guard_above_every_shipped_model():
    for key, value in [("hidden_size", 10 ** 9), ("ffn_hidden_size", 10 ** 9), ("seq_length", 10 ** 11),
                       ("num_heads", 10 ** 6), ("num_kv_heads", 10 ** 6), ("head_dim", 10 ** 6),
                       ("vocab_size", 10 ** 9), ("num_layers", 4096)]:
        assert "a typo?" in _refused(lambda sizes={key: value}: replace(MODEL, **sizes), f"model.{key}")
    assert all(load_model(name) for name in group_options("model"))


def _train_figures(p) -> list[float]:
    """The figures of the train line: its time, band, GPU-hours, cost and band."""
    line = next(line for line in format_prediction(p).splitlines() if line.startswith("train "))
    said = re.match(r"train \S+ tokens   {0} s \(90% band {0}-{0}\), {0} GPU-hours, \${0} \(band \${0}-{0}\)"
                    .format(r"(\d[\d,]*\.?\d*(?:e-\d\d)?)"), line)
    assert said, line
    return [float(x.replace(",", "")) for x in said.groups()]


def test_a_small_job_s_time_and_cost_read_in_significant_figures():
    # was "train 1 tokens   0.0 s (90% band 0.0-0.0), 0 GPU-hours, $0 (band $0-0)"
    seconds, low, high, gpu_hours, usd, cheap, dear = _train_figures(predict(MODEL, A100, TP8, 64, train_tokens=1,
                                                                             draws=200))
    # one step (a run takes whole steps): about a second, 0.02 GPU-hours, 5 cents
    assert 0 < low < seconds < high < 10 and 0 < gpu_hours < 0.2 and 0 < cheap < usd < dear < 1
    # was "16.9 s (90% band 13.1-22.9), 0 GPU-hours, $1 (band $1-1)"
    _, _, _, gpu_hours, usd, cheap, dear = _train_figures(predict(MODEL, A100, TP8, 64, train_tokens=1e6, draws=200))
    assert 0.1 < gpu_hours < 1 and 0.1 < cheap < usd < dear < 10 and len({cheap, usd, dear}) == 3


def test_compact_number_past_its_largest_suffix():
    assert [compact_number(v) for v in (0.0123, 999.6, 999_600, 2.61e12, 999.4e12, 1.04e16)] == \
        ["0.0123", "1.00k", "1.00M", "2.61T", "999T", "1.04e+16"]  # 2.61e12 was 2.61e+03B


def test_a_huge_comparison_reads_in_one_notation():
    # was "GPU-hours p50 2.61e+03B", "cost p50 (USD) $1.04e+04B" and "energy p50 (MWh) 1,830,309,886"
    c = compare(load_model("llama3-405b"), ["h100-sxm"], ParallelConfig(tp=8, pp=16), 1 << 24, train_tokens=1e18,
                draws=100)
    rows = {line[:22].strip(): line[22:].strip() for line in format_comparison(c).splitlines()}
    assert re.fullmatch(r"\d\.\d\dT", rows["GPU-hours p50"]) and re.fullmatch(r"\$\d+\.?\d*T", rows["cost p50 (USD)"])
    assert re.fullmatch(r"\d\.\d\dB", rows["energy p50 (MWh)"]), rows


def test_the_scale_table_s_columns_stay_apart():
    r = variability(MODEL, A100, TP8, 64, settings=AnalysisConfig(draws=100, runs=100, scales=[64, 1 << 24]),
                    train_tokens=1e18)
    text = format_variability(r)
    # was "16777216 2097152    1.167": the gpus and dp columns ran together
    head = next(line for line in text.splitlines() if line.lstrip().startswith("gpus"))
    row = next(line for line in text.splitlines() if line.lstrip().startswith("16,777,216"))
    assert row.split()[:2] == ["16,777,216", "2,097,152"] and len(row) == len(head)
    # was "6028436 interruptions"
    assert re.search(r", \d{1,3}(,\d{3})+ interruptions", text), text
    # was "p5 55408936533.252", and in the table a step wider than its column
    huge = replace(r, step_time_s={k: 5.5408936533252e10 for k in r.step_time_s},
                   scales=[r.scales[0] | {"nominal_s": 5.5e10, "p50_s": 5.6e10, "p95_s": 5.7e10}])
    text = format_variability(huge)
    assert "p5 55,408,936,533.252" in text
    row = next(line for line in text.splitlines() if line.lstrip().startswith("64 "))
    assert row.split()[2:5] == ["55,000,000,000.000", "56,000,000,000.000", "57,000,000,000.000"]

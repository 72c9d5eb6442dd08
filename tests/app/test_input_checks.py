"""Bad input a new user tries: one line naming the field, exit code 2, never a traceback,
before any work is done where the input can be checked up front."""
import gzip
import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from predictor.app.cli import main
from predictor.core.errors import PrismError
from predictor.core.files import writable
from predictor.core.layout import resolve_layout
from predictor.core.profiles import REPO_ROOT, read_yaml
from predictor.core.specs import ParallelConfig
from predictor.data.measurements import layout_configs, read_measurements

JOB = ["predict", "model=llama3-8b", "hardware=h100-sxm", "gpus=8"]


def test_unwritable_figure_paths_are_refused_before_the_work(tmp_path, capsys):
    a_file = tmp_path / "afile"
    a_file.write_text("")
    assert main([*JOB, f"plot={a_file / 'x.png'}"]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert main(["validate", f"measured={REPO_ROOT / 'measurements' / 'local-cpu-suite-C.parquet'}",
                 "hardware=local-cpu", f"out={tmp_path / 'v.txt'}"]) == 2
    assert "out=" in capsys.readouterr().err
    with pytest.raises(PrismError, match="is a folder"):
        writable("plot", tmp_path)
    assert writable("out", tmp_path / "new" / "deeper", folder=True).is_dir()  # missing folders are made


def test_a_models_dir_without_the_hardware_s_models_is_refused(tmp_path, capsys):
    assert main([*JOB, f"models_dir={tmp_path}"]) == 2
    assert "no trained models of h100-sxm" in capsys.readouterr().err
    (tmp_path / "h100-sxm").mkdir()
    (tmp_path / "h100-sxm" / "manifest.json").write_text("[1, 2, 3]")
    assert main([*JOB, f"models_dir={tmp_path}"]) == 2
    assert "not the manifest's object" in capsys.readouterr().err


def test_a_damaged_measure_file_names_the_layout(tmp_path):
    frame = read_measurements(REPO_ROOT / "measurements" / "local-cpu-suite-C.parquet")
    layout = frame.layout_id.iloc[0]
    frame.loc[frame.layout_id == layout, "parallel_json"] = "{dp: 1"
    frame.to_parquet(tmp_path / "m.parquet")
    with pytest.raises(PrismError, match="parallel_json of layout"):
        layout_configs(read_measurements(tmp_path / "m.parquet"), layout)
    frame.to_csv(tmp_path / "m.csv")
    with pytest.raises(PrismError, match="published="):
        read_measurements(tmp_path / "m.csv")


def test_a_damaged_trace_and_an_unknown_hardware_are_refused(tmp_path, capsys):
    bad = tmp_path / "t.json.gz"
    bad.write_bytes(gzip.compress(json.dumps({"traceEvents": [{"ph": "X"}] * 50}).encode())[:40])
    assert main(["import-trace", str(bad), f"out={tmp_path / 'store'}", "hardware=local-cpu"]) == 2
    assert "unreadable" in capsys.readouterr().err
    assert main(["import-trace", str(bad), f"out={tmp_path / 'store'}", "hardware=nosuchhw"]) == 2
    assert "nosuchhw" in capsys.readouterr().err
    assert main(["import-trace", str(bad), f"out={tmp_path / 'store'}", "profiler_cost_us=-3"]) == 2
    assert "profiler_cost_us=-3" in capsys.readouterr().err


def test_parallel_degrees_are_checked_before_dividing_the_gpus():
    with pytest.raises(PrismError, match="parallel.cp=0"):
        resolve_layout(ParallelConfig(cp=0), 8)
    assert resolve_layout(ParallelConfig(tp=2), 8).dp == 4
    assert resolve_layout(ParallelConfig(tp=2, dp=4), 8).dp == 4  # an explicit dp that agrees stands


def test_a_reader_that_leaves_early_ends_the_output_quietly():
    # JSON far longer than the pipe's buffer (180 KB), read one line
    run = subprocess.run(f"{sys.executable} -m predictor.app.cli search model=tiny hardware=local-cpu gpus=8 "
                         f"top=200 --json | head -1", shell=True, capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() and "Traceback" not in run.stderr and "BrokenPipe" not in run.stderr


# ---- the Python API, as a notebook calls it

@pytest.mark.parametrize("layout, field", [
    (ParallelConfig(sequence_parallel="false"), "parallel.sequence_parallel"),  # a string would count as on
    (ParallelConfig(etp="2"), "parallel.etp"),
    (ParallelConfig(recompute_modules=["mlp"], recompute="selective"), "parallel.recompute_modules"),
    (ParallelConfig(recompute_modules="moe,moe", recompute="selective"), "parallel.recompute_modules"),
    (ParallelConfig(recompute_modules="mlp"), "parallel.recompute_modules"),  # read under selective only
    ({"tpp": 2}, "parallel.tpp"),
    (5, "layout"),
])
def test_a_layout_the_api_cannot_read_names_its_field(layout, field):
    from predictor.analyses.predict import predict
    with pytest.raises(PrismError) as exc:
        predict("llama3-8b", "h100-sxm", layout, gpus=8, draws=100)
    assert exc.value.field == field


def test_the_api_takes_names_numpy_counts_and_gives_plain_json():
    from predictor.analyses.compare import compare
    from predictor.analyses.predict import predict
    from predictor.core.layout import MAX_GPUS
    p = predict("llama3-8b", "h100-sxm", {"tp": np.int64(8)}, gpus=np.int64(8), draws=100)
    assert json.loads(json.dumps(p.to_dict()))["layout"]["tp"] == 8
    assert [r.hardware for r in compare("llama3-8b", "h100-sxm", None, 8, draws=100).results] == ["h100-sxm"]
    with pytest.raises(PrismError, match="gpus="):
        predict("llama3-8b", "h100-sxm", None, gpus=MAX_GPUS * 2)
    assert main([*JOB, "hardware.train_dtype=fp16"]) == 2  # fp8 and fp4 belong in gemm_dtype


def test_variability_settings_of_the_wrong_type_name_the_setting():
    from predictor.analyses.variability import AnalysisConfig, check_analysis
    for bad, key in [(dict(draws="2000"), "draws"), (dict(thresholds=0.1), "thresholds"), (dict(scales=8), "scales"),
                     (dict(slow_nodes=0.5), "slow_nodes"), (dict(slow_factor=float("inf")), "slow_factor")]:
        with pytest.raises(PrismError) as exc:
            check_analysis(AnalysisConfig(**bad))
        assert exc.value.field == f"analysis.{key}"


def test_predict_table_checks_what_every_row_shares_once():
    from predictor.analyses.batch import predict_table
    rows = pd.read_csv(REPO_ROOT / "data" / "e2e" / "e2e_training_visible.csv").head(2)
    assert len(predict_table(rows.iloc[0], draws=100)) == 1  # a row is a one-row table
    assert len(predict_table(rows.to_dict("records"), draws=100)) == 2
    for kwargs, field in [({"draws": 0}, "draws"), ({"seed": -1}, "seed"), ({"models_root": "/no/such"}, "models_dir")]:
        with pytest.raises(PrismError) as exc:
            predict_table(rows, **kwargs)
        assert exc.value.field == field
    with pytest.raises(PrismError, match="no column gpu"):
        predict_table(rows.drop(columns=["gpu"]))


def test_a_sample_store_with_text_in_numbers_or_an_unknown_pass_is_refused(tmp_path):
    from predictor.data import store
    rows = store.read_samples(REPO_ROOT / "samples" / "local-cpu").head(20).copy()
    bad = rows.astype({"latency_us": str})
    bad.loc[bad.index[0], "latency_us"] = "fast"
    bad.to_parquet(tmp_path / "text.parquet")
    with pytest.raises(PrismError, match="column 'latency_us' holds text"):
        store.read_samples(tmp_path / "text.parquet")
    as_text = rows.astype({"latency_us": str})
    as_text.to_parquet(tmp_path / "numbers.parquet")
    assert store.read_samples(tmp_path / "numbers.parquet").latency_us.dtype.kind == "f"  # read as numbers
    sideways = rows.assign(**{"pass": "sideways"})
    sideways.to_parquet(tmp_path / "pass.parquet")
    with pytest.raises(PrismError, match="column 'pass'"):
        store.read_samples(tmp_path / "pass.parquet")
    # `prism samples` raised KeyError: 'm', and so did a resumed `prism sample`
    gemm = store.read_samples(REPO_ROOT / "samples" / "local-cpu", ops=["gemm"]).head(20)
    gemm.drop(columns=["m"]).to_parquet(tmp_path / "no_m.parquet")
    with pytest.raises(PrismError, match="column 'm': missing, and every gemm row needs its shape"):
        store.read_samples(tmp_path / "no_m.parquet")
    gemm.assign(m=np.where(np.arange(len(gemm)) == 0, np.nan, gemm.m)).to_parquet(tmp_path / "blank_m.parquet")
    with pytest.raises(PrismError, match="column 'm': empty in some rows"):
        store.read_samples(tmp_path / "blank_m.parquet")
    (tmp_path / "empty").mkdir()  # was: 'holds no sample runs (.parquet)'
    gemm.head(0).to_parquet(tmp_path / "empty" / "run.parquet")
    assert store.no_runs(tmp_path / "empty").endswith("holds 1 sample run(s) with no rows (run.parquet); sample "
                                                      f"again: prism sample output_dir={tmp_path / 'empty'}")


def test_train_notes_thin_models_and_evaluate_notes_in_sample_scores(tmp_path, capsys):
    from predictor.data import store
    rows = store.read_samples(REPO_ROOT / "samples" / "local-cpu")
    rows = rows[rows.op.isin(["gemm", "rmsnorm"])]
    one_shape = rows.groupby(["op", "pass"]).head(3)  # three repeats of one shape each
    one_shape.to_parquet(tmp_path / "one.parquet")
    assert main(["train", f"samples={tmp_path / 'one.parquet'}", "hardware=local-cpu",
                 f"models_dir={tmp_path / 'm'}", "regressor.params.n_estimators=5"]) == 0
    assert "rest on fewer than 4 shapes" in capsys.readouterr().out
    assert main(["evaluate", f"samples={tmp_path / 'one.parquet'}", "hardware=local-cpu",
                 f"models_dir={tmp_path / 'm'}", "--json"]) == 0
    assert all(r["in_sample"] for r in json.loads(capsys.readouterr().out))


@pytest.mark.parametrize("text, says", [
    (b"- name: x\n", "a YAML list, not a mapping"),
    (b"name: [unclosed\n", "not valid YAML at line 2"),
    (b"name: caf\xe9\n", "not UTF-8"),
])
def test_a_config_file_that_is_not_a_yaml_mapping_is_named(tmp_path, text, says):
    path = tmp_path / "mine.yaml"
    path.write_bytes(text)
    with pytest.raises(PrismError, match=says) as error:
        read_yaml(path)
    assert error.value.field == str(path)
    path.write_text("")
    assert read_yaml(path) == {}  # an empty file is no settings


def test_compare_takes_none_or_a_generator_and_refuses_a_profile_twice():
    from predictor.analyses.compare import check_hardware, gpu_profiles
    assert check_hardware(None) == gpu_profiles()
    assert check_hardware(name for name in ["h100-sxm", "b200"]) == ["h100-sxm", "b200"]
    with pytest.raises(PrismError, match="h100-sxm given twice"):
        check_hardware(["h100-sxm", "h100-sxm"])
    with pytest.raises(PrismError, match="a list of profiles"):
        check_hardware(5)


@pytest.mark.parametrize("overrides, message", [
    (["parallel.dp=4096"], "4096 rank.* need 4096 cores"),  # one core per rank, or the ranks time each other
    (["model=llama3-405b"], "model=llama3-405b: its 1 rank.* GiB to train, this machine has"),
    (["measure.trace_dir={text}"], "measure.trace_dir=.* is a file"),
    (["out={junk}"], "out=.*: exists and is no measurement file to add to"),
    (["out={text}"], "out=.*notes.txt: a measurement file is Parquet"),
])
def test_measure_refuses_what_it_cannot_run_or_keep_before_the_run(tmp_path, capsys, overrides, message):
    pytest.importorskip("torch")
    text = tmp_path / "notes.txt"
    text.write_text("not parquet")
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    args = [o.format(text=text, junk=junk) for o in overrides]
    out = [] if any(a.startswith("out=") for a in args) else [f"out={tmp_path / 'm.parquet'}"]
    assert main(["measure", "model=tiny", *args, *out]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert text.read_text() == junk.read_text() == "not parquet" and not (tmp_path / "m.parquet").exists()


@pytest.mark.parametrize("verb, key", [("train", "models_dir"), ("sample", "output_dir")])
def test_a_destination_that_is_a_file_is_refused_before_any_work(tmp_path, capsys, verb, key):
    if verb == "sample":
        pytest.importorskip("torch")
    text = tmp_path / "notes.txt"
    text.write_text("kept")
    extra = ["samples=" + str(REPO_ROOT / "samples" / "local-cpu")] if verb == "train" else []
    assert main([verb, "hardware=local-cpu", *extra, f"{key}={text}"]) == 2
    err = capsys.readouterr().err
    assert f"{key}={text}" in err and "is a file" in err and len(err.strip().splitlines()) == 1
    assert text.read_text() == "kept"


def test_a_microbench_table_cut_mid_quote_is_named(tmp_path):
    import shutil

    from predictor.data.importers.microbench import import_microbench
    folder = tmp_path / "microbench"
    shutil.copytree(REPO_ROOT / "data" / "microbench", folder)
    table = folder / "op_gemm_xla_perf_table.csv"
    table.write_text(table.read_text().splitlines()[0] + '\nrow,"cut mid quote\n')
    with pytest.raises(PrismError, match="op_gemm_xla_perf_table.csv: not a readable CSV .*restore it"):
        import_microbench(folder, "h100-sxm", tmp_path / "out")
    with pytest.raises(PrismError, match="a file; give the folder"):
        import_microbench(table, "h100-sxm", tmp_path / "out")


def test_sequence_parallelism_needs_tp_to_divide_the_tokens(capsys):
    assert main(["predict", "model=llama3-8b", "hardware=h100-sxm", "gpus=8", "parallel.tp=8",
                 "parallel.sequence_parallel=true", "model.seq_length=8191"]) == 2
    assert "parallel.sequence_parallel: splits each rank's 8191 tokens over tp=8" in capsys.readouterr().err
    assert main(["predict", "model=llama3-8b", "hardware=h100-sxm", "gpus=8", "parallel.tp=8",
                 "parallel.sequence_parallel=true", "model.seq_length=8192"]) == 0


@pytest.mark.parametrize("override, field", [("sampling.ops=[]", "sampling.ops"),
                                             ("sampling.max_call_ms=0", "sampling.max_call_ms")])
def test_a_sampling_plan_that_measures_nothing_is_refused(override, field):
    pytest.importorskip("torch")
    from predictor.app.config import load_config
    from predictor.core.profiles import section
    from predictor.core.specs import HardwareConfig, SamplingConfig
    from sampling.plan import make_plan
    cfg = load_config(["hardware=local-cpu", override])
    with pytest.raises(PrismError) as exc:
        make_plan(section(cfg, "sampling", SamplingConfig), section(cfg, "hardware", HardwareConfig))
    assert exc.value.field == field


def test_the_python_api_takes_names_and_one_op_and_names_what_it_refuses(tmp_path):
    """Calls as the README shows them that raised AttributeError or TypeError, or answered
    nothing: a hardware name, one op as text, one set as text, a GPU in lower case, a dict row."""
    from predictor.analyses.variability import AnalysisConfig, check_analysis
    from predictor.data.published import measured_step_s, published_runs
    from predictor.data.store import read_samples
    from predictor.latency.artifacts import ModelSet, trained_models

    assert trained_models("a100-sxm4-80gb").hw.name == "a100-sxm4-80gb"
    with pytest.raises(PrismError, match="a HardwareConfig"):
        trained_models(None)
    with pytest.raises(PrismError, match="no such folder"):  # was 'no trained models ... train them'
        ModelSet.load(tmp_path / "none", "h100-sxm")
    assert len(read_samples(REPO_ROOT / "samples" / "local-cpu", ops="gemm")) > 0  # was 0: read as g, e, m, m
    with pytest.raises(PrismError, match="unknown op 'gemmm'"):
        read_samples(REPO_ROOT / "samples" / "local-cpu", ops=["gemmm"])
    e2e = REPO_ROOT / "data" / "e2e"
    assert len(published_runs(e2e, "vtrain_multi")) == len(published_runs(e2e, ["vtrain_multi"])) > 0
    assert len(published_runs(e2e, gpu="h100")) == len(published_runs(e2e, gpu="H100")) > 0
    for kwargs, field in (({"set_ids": ["nope"]}, "set_ids"), ({"gpu": 100}, "gpu")):
        with pytest.raises(PrismError) as exc:
            published_runs(e2e, **kwargs)
        assert exc.value.field == field
    row = published_runs(e2e, "vtrain_multi").iloc[0]
    assert measured_step_s(dict(row)) == measured_step_s(row) == row.iter_time_s
    with pytest.raises(PrismError, match="iter_time_s='abc': not a positive number"):
        measured_step_s({"iter_time_s": "abc"})
    assert check_analysis({"draws": 500}) == AnalysisConfig(draws=500)
    with pytest.raises(PrismError, match="'slownodes' is no setting of AnalysisConfig"):
        check_analysis({"slownodes": 1})

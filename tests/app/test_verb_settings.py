"""Bad input a fifth new-user probe found in the importers, the settings of prism sample and
prism measure, path settings Hydra reads as numbers, the Python API and Mixture-of-Experts
layouts in the scale study. Each is one line naming the field, before any work and with
nothing written, never a traceback or a plausible wrong answer."""
import json

import pytest

from predictor.analyses.predict import predict
from predictor.analyses.variability import scale_points, scales_note
from predictor.app.cli import main
from predictor.core.errors import PrismError
from predictor.core.profiles import REPO_ROOT
from predictor.core.specs import ParallelConfig

H100_TRACE = REPO_ROOT / "measurements" / "h100-gpt3-1.3b-step-trace.json.gz"
MICROBENCH = REPO_ROOT / "data" / "microbench"
JOB = ["predict", "model=llama3-8b", "hardware=h100-sxm", "gpus=8"]


def _error(capsys, verb: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith(f"prism {verb}: error:") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_a_gpu_trace_is_not_filed_under_another_gpu(tmp_path, capsys):
    # was: the H100 trace's kernel times written as b200 samples
    assert main(["import-trace", str(H100_TRACE), f"out={tmp_path}", "hardware=b200"]) == 2
    err = _error(capsys, "import-trace")
    assert "hardware=b200" in err and "hardware=h100-sxm" in err
    assert not list(tmp_path.iterdir())


def test_a_profile_whose_names_fit_the_traced_gpu_is_the_user_s_to_choose():
    from predictor.core.profiles import fits_profile
    assert fits_profile("NVIDIA H100 PCIe", "h100-sxm")  # as a profile of one's own with match: [H100 PCIe] would
    assert not fits_profile("NVIDIA H100 80GB HBM3", "b200") and not fits_profile("NVIDIA H100 80GB HBM3", "local-cpu")


@pytest.mark.parametrize("verb, path", [
    ("import-microbench", MICROBENCH), ("import-ett", REPO_ROOT / "data" / "ett" / "Vista")])
def test_an_importer_refuses_an_unknown_output(tmp_path, capsys, verb, path):
    # was: output=xml printed the table, as if heard
    assert main([verb, str(path), f"out={tmp_path}", "output=xml"]) == 2
    assert "output=xml: choose table or json" in _error(capsys, verb)
    assert not list(tmp_path.iterdir())


def test_import_microbench_checks_every_hardware_before_writing(tmp_path, capsys):
    # was: h100-sxm imported, then the error on nope, and a rerun refused as "already exists"
    assert main(["import-microbench", str(MICROBENCH), f"out={tmp_path}", "hardware=h100-sxm,nope"]) == 2
    assert "hardware=nope" in _error(capsys, "import-microbench")
    assert not list(tmp_path.iterdir())
    # was: b200 written, then the second b200 ended the command with an error
    assert main(["import-microbench", str(MICROBENCH), f"out={tmp_path}", "hardware=b200,b200", "--json"]) == 0
    capsys.readouterr()
    assert [p.name for p in tmp_path.iterdir()] == ["microbench-b200.parquet"]
    # a rerun of the same tables keeps the run (a stopped import goes on where it stopped) and says so
    before = (tmp_path / "microbench-b200.parquet").read_bytes()
    assert main(["import-microbench", str(MICROBENCH), f"out={tmp_path}", "hardware=b200"]) == 0
    assert "microbench-b200 was already imported from these tables" in capsys.readouterr().err
    assert (tmp_path / "microbench-b200.parquet").read_bytes() == before


@pytest.mark.parametrize("override, message", [
    ("sampling.dtypes=[]", "sampling.dtypes=[]: names no dtype"),  # was IndexError
    ("sampling.warmup=-1", "sampling.warmup=-1"),  # was accepted
    ("sampling.tp_degrees=[0]", "sampling.tp_degrees=[0]"),  # skipped every target's shapes, silently
    ("sampling.tp_degrees=[]", "sampling.tp_degrees=[]"),
    ("sampling.micro_batch_sizes=[2,-1]", "sampling.micro_batch_sizes=[2, -1]"),  # was blamed on sampling.targets
])
def test_sample_refuses_a_plan_it_cannot_time(tmp_path, capsys, override, message):
    pytest.importorskip("torch")
    assert main(["sample", f"output_dir={tmp_path}", "sampling.budget_s=1", override]) == 2
    assert message in _error(capsys, "sample")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("override, message", [
    ("gpus=abc", "gpus='abc'"),  # was TypeError
    ("gpus=0", "gpus=0"),  # measured one rank, silently
    ("gpus=true", "gpus=True"),  # measured one rank, silently
    ("measure.timeout_s=nan", "measure.timeout_s=nan"),  # a limit that never stops a hung layout
    ("measure.trace_steps=0", "measure.trace_steps=0"),  # measured, and wrote no trace
    ("measure.trace_steps=-2", "measure.trace_steps=-2"),  # failed in the ranks after the timed steps
])
def test_measure_refuses_bad_settings_before_it_starts(tmp_path, capsys, override, message):
    pytest.importorskip("torch")
    out = tmp_path / "m.parquet"
    assert main(["measure", f"out={out}", f"measure.trace_dir={tmp_path / 'traces'}", override]) == 2
    assert message in _error(capsys, "measure")
    assert not out.exists()


def test_measure_writes_parquet_under_a_parquet_name_only(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "m.csv"
    assert main(["measure", f"out={out}"]) == 2  # was: Parquet written into m.csv
    assert "a measurement file is Parquet; name it *.parquet" in _error(capsys, "measure")
    assert not out.exists()


@pytest.mark.parametrize("args", [["predict", "--json", "parallel.tp=abc"], ["predict", "output=json", "gpus=0"]])
def test_a_json_run_that_fails_says_so_in_json_on_stdout(capsys, args):
    assert main(args) == 2
    out = capsys.readouterr()
    said = json.loads(out.out)
    assert said["field"] in ("parallel.tp", "gpus") and said["error"] in out.err


@pytest.mark.parametrize("override", ["models_dir=[a,b]", "models_dir=true", "plot=[a]", "plot=true"])
def test_a_path_setting_takes_one_path(tmp_path, capsys, monkeypatch, override):
    monkeypatch.chdir(tmp_path)  # plot=[a] wrote "['a'].png" here
    assert main([*JOB, override]) == 2
    assert f"{override}: {override.partition('=')[0]} takes one path" in _error(capsys, "predict")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("models_dir", [5, ["runs/models"], True])
def test_the_api_names_a_models_dir_that_is_no_path(models_dir):
    with pytest.raises(PrismError) as exc:  # was TypeError
        predict("llama3-8b", "h100-sxm", None, gpus=8, draws=50, models_dir=models_dir)
    assert exc.value.field == "models_dir"


def test_a_list_for_a_comma_separated_setting_says_how_to_write_it(capsys):
    job = ["predict", "model=deepseek-v3", "hardware=b200", "gpus=256", "parallel.pp=8", "parallel.ep=32",
           "parallel.recompute=selective"]
    # was: "['mla_up_proj', 'moe'] is not a list; write it in brackets", the brackets just written
    assert main([*job, "parallel.recompute_modules=[mla_up_proj,moe]"]) == 2
    assert "parallel.recompute_modules='a,b'" in _error(capsys, "predict")
    assert main([*job, "parallel.recompute_modules=mla_up_proj,moe"]) == 2
    assert "write its commas in quotes: parallel.recompute_modules='mla_up_proj,moe'" in _error(capsys, "predict")


def test_the_scale_study_keeps_every_gpu_count_an_expert_layout_can_hold():
    # was: the default scale of 8 GPUs ended prism variability for ep=64 with
    # "parallel.ep=64: ... beyond the tp·cp·dp = 1 GPUs of a pipeline stage"
    assert scale_points(ParallelConfig(pp=16, ep=64), [8, 64, 512, 4096], 1024) == [1024, 4096]
    assert scale_points(ParallelConfig(tp=2, ep=8, etp=2), [8, 20], 64) == [16, 32, 64]  # tp·dp a multiple of 16
    assert scale_points(ParallelConfig(tp=8, pp=8), [8, 64, 100], 512) == [64, 128, 512]
    # and the report says which it rounded up, not only the table
    note = scales_note(ParallelConfig(tp=8, pp=8), [8, 64, 100], 512)
    assert "8 -> 64, 100 -> 128 GPUs" in note and "the 64 GPUs that hold the layout" in note
    assert scales_note(ParallelConfig(tp=8), [8, 64], 512) is None


def test_variability_of_an_expert_layout_runs_at_the_default_scales(capsys):
    job = ["variability", "model=qwen3-30b-a3b", "hardware=b200", "gpus=32", "parallel.ep=32", "analysis.draws=100",
           "analysis.runs=100", "analysis.scales=[8,64]", "--json"]
    assert main(job) == 0, capsys.readouterr().err

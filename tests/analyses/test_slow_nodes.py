"""prism variability: slow-node placements at any count of slow nodes the job holds, and a
run that failures stretch past any use reported as not finishing, not as a capped number."""
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from predictor.analyses.variability import (
    NO_PROGRESS,
    AnalysisConfig,
    placements,
    time_to_train,
    variability,
    wall_time_stretch,
)
from predictor.app.cli import main
from predictor.core.mesh import Mesh
from predictor.core.profiles import load_hardware, load_model
from predictor.core.specs import ParallelConfig

A100 = load_hardware("a100-sxm4-80gb")
GPT13B = ["model=gpt3-13b", "hardware=a100-sxm4-80gb", "gpus=64", "parallel.tp=8"]
FAST_CLI = ["analysis.draws=200", "analysis.runs=200", "analysis.scales=[64]"]


def _nodes(mesh: Mesh) -> int:
    return math.ceil(mesh.world_size / mesh.gpus_per_node)


def test_every_count_of_slow_nodes_the_job_holds_has_placements_holding_that_many():
    """512 GPUs, tp=8 pp=4 on 8-GPU nodes: 64 nodes, 16 a stage. Past 16 slow nodes the
    "all in stage N" placements vanished, past 31 every placement did: 64 slow nodes printed
    only "no slow nodes" (x1.000) as the answer."""
    meshes = [Mesh(tp=8, cp=1, dp=16, pp=4, ep=1, gpus_per_node=8),  # 16 nodes a stage
              Mesh(tp=8, cp=1, dp=8, pp=8, ep=1, gpus_per_node=8),
              Mesh(tp=4, cp=1, dp=1, pp=8, ep=1, gpus_per_node=8),  # a stage is half a node
              Mesh(tp=2, cp=1, dp=3, pp=8, ep=1, gpus_per_node=8)]  # stages straddle nodes
    for mesh in meshes:
        for k in range(1, _nodes(mesh) + 1):
            placed = placements(mesh, k)
            assert placed, (mesh, k)
            for name, chosen in placed.items():
                assert len(set(chosen)) == k and all(0 <= n < _nodes(mesh) for n in chosen), (mesh, k, name)
                slow = mesh.gpus_per_stage_on(chosen)
                assert sum(slow) == k * mesh.gpus_per_node or k == _nodes(mesh), (mesh, k, name, slow)
    big = meshes[0]
    assert set(placements(big, 20)) >= {"packed in stages 0-1 (first)", "packed in stages 2-3 (last)",
                                        "packed in stages 1-2 (middle)", "spread over stages, same dp replica"}
    assert [big.gpus_per_stage_on(c) for c in placements(big, 64).values()] == [(128, 128, 128, 128)]


def test_every_node_slow_slows_the_step_by_about_the_slow_factor():
    report = variability(load_model("llama3-70b"), load_hardware("h100-sxm"), ParallelConfig(tp=8, pp=4), 512,
                         settings=AnalysisConfig(draws=200, runs=200, scales=[512], slow_nodes=64, slow_factor=1.1))
    assert report.placements[0]["placement"] == "no slow nodes"
    rows = report.placements[1:]
    assert rows, "no placement of the 64 slow nodes"
    for r in rows:
        assert len(r["nodes"]) == 64 and r["slow_gpus_per_stage"] == [128, 128, 128, 128]
        assert 1.05 < r["vs_no_slow_nodes"] <= 1.1 + 1e-9
    assert report.placement_spread == pytest.approx(1.0)


def test_time_to_train_grows_with_the_failure_rate_until_the_run_does_not_finish():
    """gpt3-13b on 64 A100s: from 50 interruptions per GPU-day on, every rate gave 1.025e24
    days and goodput 1.93e-22 (the stretch capped at e^50) while interruptions grew tenfold."""
    step = np.full(10, 3.0)
    days, finished = [], []
    for rate in (10, 20, 25, 29, 30, 31, 50, 100, 1e3, 1e6):
        hw = replace(A100, variability=replace(A100.variability, interruptions_per_gpu_day=rate))
        t = time_to_train(step, 1e6, hw, 64, runs=300, seed=0)
        log_stretch = math.log(wall_time_stretch(rate * 64, 30.0, 10.0)[0])
        finished.append(t["days"] is not None)
        if finished[-1]:
            assert log_stretch <= NO_PROGRESS
            days.append(t["days"]["p50"])
        else:
            assert math.isinf(log_stretch)
            assert t["interruptions"] is None and t["goodput"]["p50"] == 0
            assert t["productive_days"]["p50"] > 0
    assert all(b > 1.5 * a for a, b in zip(days, days[1:])), days  # grows, never plateaus at a cap
    assert finished == sorted(finished, reverse=True) and finished[0] and not finished[-1]


@pytest.mark.parametrize("rate", ["50", "1e6"])
def test_cli_says_a_run_past_any_use_does_not_finish(rate, capsys):
    setting = f"hardware.variability.interruptions_per_gpu_day={rate}"
    assert main(["variability", *GPT13B, setting, *FAST_CLI, "--json"]) == 0
    t = json.loads(capsys.readouterr().out)["time_to_train"]
    assert t["days"] is None and t["interruptions"] is None and t["goodput"]["p50"] == 0
    assert main(["variability", *GPT13B, setting, *FAST_CLI]) == 0
    text = capsys.readouterr().out
    assert "does not finish" in text and "1,025," not in text
    note = next(line for line in text.splitlines() if line.startswith("note") and "failure every" in line)
    for fix in ("checkpoint_interval_min", "restart_cost_min", "fewer GPUs"):
        assert fix in note, note


def test_variability_and_predict_read_one_median_step(capsys):
    """variability's time to train (the composed step) and predict's (leaning with the doubt
    about the median step) once read 33 and 40 days for one job without a word: the median
    step is now the composed median in both."""
    args = ["model=llama3-70b", "hardware=h100-sxm", "gpus=512", "parallel.tp=8", "parallel.pp=4", "--json"]
    assert main(["variability", *args, *FAST_CLI[:2], "analysis.scales=[512]"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert main(["predict", *args]) == 0
    predicts = json.loads(capsys.readouterr().out)["predictive"]["median_step_s"]["p50"]
    composed, median = report["step_time_s"]["p50"], report["predictive"]["median_step_s"]["p50"]
    assert median == pytest.approx(predicts, rel=0.01) and median == pytest.approx(composed, rel=0.01)

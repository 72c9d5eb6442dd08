"""`prism measure`: the reference workload under torchrun, its file, and the layouts it refuses;
the torchrun launcher's errors and signals."""
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from predictor.app.config import load_config
from predictor.core.errors import PrismError  # noqa: E402
from predictor.core.profiles import load_hardware, load_model, section
from predictor.core.specs import ModelConfig, ParallelConfig
from predictor.data.measurements import (  # noqa: E402
    COLUMNS,
    join_passes,
    layout_configs,
    measured_workloads,
    pass_repeatability,
    read_measurements,
    step_times,
)
from sampling.launch import run_torchrun  # noqa: E402
from sampling.measure import layout_id, measure  # noqa: E402
from tests.conftest import ROOT  # noqa: E402

QUICK = ["model=tiny", "measure.steps=3", "measure.warmup=1", "measure.steal_retakes=0"]  # steps: 3 under steal too


def run(tmp_path, *overrides):
    return measure(load_config([*QUICK, f"out={tmp_path / 'm.parquet'}", *overrides]), progress=False)


@pytest.mark.slow
def test_one_rank_then_a_pipeline_layout_appends(tmp_path):
    first = run(tmp_path)
    assert first.layout_id == "tiny seq128 dp1 tp1 pp1 mbs1 gbs4 rc=none 1f1b"
    assert first.ranks == 1 and first.steps == 3 and first.backend == "gloo"
    assert 0 < first.median_step_s <= first.p95_step_s < first.wall_s

    second = run(tmp_path, "parallel.pp=2", "parallel.global_batch_size=4", "parallel.recompute=full")
    assert second.layout_id == "tiny seq128 dp1 tp1 pp2 mbs1 gbs4 rc=full 1f1b"
    frame = read_measurements(second.path)
    assert list(frame.columns) == [*COLUMNS, "steal"]
    assert frame.steal.notna().any() and frame.steal.dropna().between(0, 1).all()  # Linux counts steal
    assert frame.groupby("layout_id").size().to_dict() == {first.layout_id: 3, second.layout_id: 6}
    assert not frame.duplicated(["layout_id", "step", "rank"]).any()
    assert (frame.step_time_s > 0).all() and set(frame.hardware) == {"local-cpu"}
    assert set(frame.threads_per_rank) == {1} and set(frame.backend) == {"gloo"}
    model, par = layout_configs(frame, second.layout_id)
    assert model == load_model("tiny")
    assert (par.pp, par.global_batch_size, par.recompute) == (2, 4, "full")
    # what prism measure writes passes the checks that refuse a layout contradicting its id or its ranks
    works = measured_workloads(frame, load_hardware("local-cpu"))
    assert [lid for lid, _, _ in works] == [first.layout_id, second.layout_id]


def test_passes_of_a_layout_join_into_one_run():
    """The validation suite measures each layout in passes apart in time; joined, the passes
    are one run per layout, every step once, started when the first pass did. The passes here:
    the shipped steps of a one-rank and a two-rank layout, split in halves measured apart."""
    shipped = read_measurements(ROOT / "measurements" / "local-cpu-suite.parquet")
    two = shipped[shipped.layout_id.isin(["tiny seq128 dp1 tp1 pp1 mbs1 gbs4 rc=none 1f1b",
                                          "tiny seq128 dp2 tp1 pp1 mbs1 gbs8 rc=none 1f1b"])]
    half = two.step.max() // 2 + 1
    frames = [two[two.step < half].assign(measured_at="2026-11-28T10:00:00"),
              two[two.step >= half].assign(step=lambda f: f.step - half, measured_at="2026-11-28T10:20:00")]
    joined = join_passes(frames)
    assert len(joined) == len(two) and not joined.duplicated(["layout_id", "step", "rank"]).any()
    for lid, group in joined.groupby("layout_id"):
        assert sorted(group.step.unique()) == list(range(2 * half))
        assert set(group.measured_at) == {"2026-11-28T10:00:00"}
        # the steps in the order the passes took them
        assert group.sort_values(["step", "rank"]).step_time_s.tolist() == (
            two[two.layout_id == lid].sort_values(["step", "rank"]).step_time_s.tolist())
    ranks = joined.groupby("layout_id")["rank"].nunique()
    assert ranks.to_dict() == {lid: 1 + ("dp2" in lid) for lid in ranks.index}
    # each pass's median against the pooled one, the slowest rank's time a step
    table = pass_repeatability(frames).set_index("layout_id")
    for lid in ranks.index:
        steps = [step_times(f[f.layout_id == lid]).step_time_s for f in frames]
        pooled = step_times(joined[joined.layout_id == lid]).step_time_s.median()
        assert table.loc[lid, ["pass1_p50_s", "pass2_p50_s"]].tolist() == [s.median() for s in steps]
        assert table.loc[lid, "pooled_p50_s"] == pooled
        assert table.loc[lid, "worst_pass_departure"] == max(abs(s.median() - pooled) for s in steps) / pooled
    assert "pass1_steal" not in table  # steps measured before steal was recorded


@pytest.mark.slow
@pytest.mark.parametrize("axis, lid", [  # the default global batch: 4 micro-batches per replica
    ("dp", "tiny seq128 dp2 tp1 pp1 mbs1 gbs8 rc=none 1f1b"),
    ("tp", "tiny seq128 dp1 tp2 pp1 mbs1 gbs4 rc=none 1f1b"),
])
def test_two_ranks_each_time_every_step(tmp_path, axis, lid):
    report = run(tmp_path, f"parallel.{axis}=2")
    frame = read_measurements(report.path)
    assert report.layout_id == lid and report.ranks == 2
    assert sorted(frame.groupby("rank").step.apply(list).to_dict().items()) == [(0, [0, 1, 2]), (1, [0, 1, 2])]
    assert json.loads(frame.parallel_json.iloc[0])[axis] == 2


def test_a_timeout_stops_the_run_and_keeps_the_file(tmp_path):
    out = tmp_path / "m.parquet"
    kept = (ROOT / "measurements" / "local-cpu-suite.parquet").read_bytes()  # earlier layouts, to be kept
    out.write_bytes(kept)
    with pytest.raises(PrismError, match="measure.timeout_s"):
        run(tmp_path, "measure.timeout_s=0.5")
    assert out.read_bytes() == kept


@pytest.mark.parametrize("override, field", [
    (["parallel.cp=2"], "parallel.cp"),
    (["parallel.sharding=zero1"], "parallel.sharding"),
    (["parallel.schedule=zero_bubble"], "parallel.schedule"),
    (["parallel.tp=2", "parallel.sequence_parallel=true"], "parallel.sequence_parallel"),  # at tp=1 it is off
    (["parallel.attention=unfused"], "parallel.attention"),
    (["parallel.recompute=per_op"], "parallel.recompute"),
    (["parallel.tp=3"], "model.num_heads"),
    (["parallel.tp=4"], "model.num_kv_heads"),
    (["parallel.dp=2", "parallel.tp=2"], "parallel.sharding"),
    (["model=tiny-gpt", "parallel.pp=2"], "model.tied_embeddings"),
    (["parallel.pp=2", "parallel.global_batch_size=1"], "parallel.global_batch_size"),
    (["measure.device=cuda"], "measure.device"),
    (["measure.backend=nccl"], "measure.backend"),
    (["measure.steps=0"], "measure.steps"),
])
def test_layouts_it_cannot_run_name_the_field(tmp_path, override, field):
    with pytest.raises(PrismError, match=field.replace(".", r"\.")):
        run(tmp_path, *override)
    assert not (tmp_path / "m.parquet").exists()


def test_out_is_required():
    with pytest.raises(PrismError, match="out="):
        measure(load_config(QUICK), progress=False)


def test_layout_id_names_changed_model_fields_and_sharding():
    cfg = load_config(["model=small", "model.num_layers=2", "model.seq_length=64", "parallel.dp=2",
                       "parallel.sharding=fsdp", "parallel.global_batch_size=8"])
    lid = layout_id(section(cfg, "model", ModelConfig), section(cfg, "parallel", ParallelConfig))
    assert lid == "small[num_layers=2] seq64 dp2 tp1 pp1 mbs1 gbs8 rc=none 1f1b fsdp"


@pytest.mark.slow
def test_a_failing_rank_gives_one_line_with_its_own_error(tmp_path):
    with pytest.raises(PrismError) as info:  # a job without its settings: every rank fails
        run_torchrun("sampling.reference", {}, 2, tmp_path, what="measure nothing", timeout_s=120,
                     timeout_field="measure.timeout_s", timeout_fix="raise it", failure_field="measure")
    message, kept = str(info.value), Path(str(info.value).rsplit(" ", 1)[1])
    assert info.value.field == "measure" and len(message.splitlines()) == 1
    assert re.match(r"measure nothing failed: rank [01] raised KeyError: 'threads_per_rank'; ", message)
    assert "ChildFailedError" in kept.read_text() and "ChildFailedError" not in message
    kept.unlink()


def _descendants(pid: int) -> set[int]:
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_sigterm_stops_torchrun_and_every_rank(tmp_path, cpu_env):
    err = tmp_path / "stderr.txt"
    with open(err, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "predictor.app.cli", "measure", *QUICK, "parallel.dp=2",
                                 "measure.steps=100000", f"out={tmp_path / 'm.parquet'}"],
                                env=cpu_env, stdout=subprocess.DEVNULL, stderr=f)
    deadline = time.time() + 120
    while not re.search(r"\| [1-9]\d*/", err.read_text()) and time.time() < deadline:
        time.sleep(0.1)  # until the ranks have taken a step
    workers = _descendants(proc.pid)
    assert len(workers) >= 3  # torchrun and its two ranks
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 130
    assert err.read_text().strip().endswith("prism measure: interrupted")
    assert not [pid for pid in workers if _running(pid)]
    assert not (tmp_path / "m.parquet").exists()

"""Hypervisor steal time: read from /proc/stat, a sampled call timed under it taken again,
each measured step's share stored beside its time."""
import math
import time

import pandas as pd
import pytest

from predictor.core.errors import PrismError
from predictor.data.measurements import pass_repeatability, read_measurements, step_times, write_measurements
from predictor.data.store import RunWriter, read_samples

# the first line of /proc/stat: user nice system idle iowait irq softirq steal guest guest_nice
LINE = "cpu  {user} 0 {system} {idle} 0 0 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"


def _stat(tmp_path, name="stat", **fields):
    path = tmp_path / name
    path.write_text(LINE.format(**{"user": 100, "system": 50, "idle": 1000, "steal": 0, **fields}))
    return path


def test_the_share_is_of_the_busy_time_between_two_readings(tmp_path):
    from sampling.cpu.steal import read_ticks, steal_share

    before = read_ticks(_stat(tmp_path, "a", user=100, system=50, idle=1000, steal=10))
    after = read_ticks(_stat(tmp_path, "b", user=170, system=70, idle=5000, steal=20))
    assert (before.busy, before.steal) == (160, 10)
    # 100 busy ticks passed (idle ones do not count), 10 of them stolen
    assert steal_share(before, after) == pytest.approx(0.10)
    assert math.isnan(steal_share(after, after))  # no busy tick: nothing to share out
    assert math.isnan(steal_share(None, after))


@pytest.mark.parametrize("text", ["", "intr 1 2 3\n", "cpu 1 2 3 4\n", "cpu a b c d e f g h\n"])
def test_a_system_that_keeps_no_steal_counter_reads_none(tmp_path, text):
    from sampling.cpu.steal import read_ticks

    path = tmp_path / "stat"
    path.write_text(text)
    assert read_ticks(path) is None
    assert read_ticks(tmp_path / "absent") is None


def test_this_machine_reads_its_counters():
    from sampling.cpu.steal import PROC_STAT, read_ticks

    if not PROC_STAT.exists():
        pytest.skip("no /proc/stat here")
    first = read_ticks()
    assert first is not None and 0 <= first.steal <= first.busy


def _loop(tmp_path, monkeypatch, shares, retakes):
    """Run the compute loop over a small gemm plan of n tasks with a fake timer, the steal of
    each timed call given in turn by ``shares(n)``; return how it ended, the stored rows, the
    retaken keys and the plan's keys."""
    pytest.importorskip("torch")
    from predictor.app.config import load_config
    from predictor.core.profiles import load_hardware, section
    from predictor.core.specs import SamplingConfig
    from sampling import runner
    from sampling.cpu.steal import CpuTicks
    from sampling.plan import make_plan

    sc = section(load_config(["sampling.ops=[gemm]", "sampling.shapes_per_op=2", "sampling.rounds=1",
                              "sampling.repeats=3", f"sampling.steal_retakes={retakes}"]), "sampling", SamplingConfig)
    plan = make_plan(sc, load_hardware("local-cpu"))
    # every call reads the counters twice: 100 busy ticks pass per call, shares[i] of them stolen
    ticks, busy, steal = [], 0, 0
    for share in shares(len(plan.compute)):
        ticks.append(CpuTicks(busy, steal))
        busy, steal = busy + 100, steal + round(100 * share)
        ticks.append(CpuTicks(busy, steal))
    monkeypatch.setattr(runner, "read_ticks", lambda: ticks.pop(0) if ticks else None)

    class Timer:
        def time(self, fn, repeats, warmup, host=False):
            return [1.0] * repeats

    writer, retaken = RunWriter(tmp_path, "run", {}), []
    ended = runner._compute_loop(plan.compute, sc, runner._device(load_hardware("local-cpu")), Timer(), writer,
                                 {"origin": "sampled", "hardware": "local-cpu"}, time.time() + 60, [],
                                 progress=False, retaken=retaken)
    writer.close()
    return ended, read_samples(tmp_path), retaken, [t.key for t in plan.compute]


def test_a_call_timed_under_steal_is_timed_again(tmp_path, monkeypatch):
    # the first task's call is stolen from (20%), the others' run clean, then the retake nearly so
    ended, rows, retaken, keys = _loop(tmp_path, monkeypatch, lambda n: [0.2] + [0.0] * (n - 1) + [0.01], retakes=2)
    assert ended == "end-of-plan" and retaken == [keys[0]] and len(keys) > 1
    assert len(rows) == len(keys) * 3  # each task's repeats stored once: the disturbed call's are not kept
    assert sorted(rows.steal) == [0.0] * 3 * (len(keys) - 1) + [0.01] * 3


def test_retakes_are_bounded_and_the_last_one_is_kept_with_its_steal(tmp_path, monkeypatch):
    ended, rows, retaken, keys = _loop(tmp_path, monkeypatch, lambda n: [0.3] * 2 * n, retakes=1)
    assert retaken == keys  # each task once, no more
    assert len(rows) == len(keys) * 3 and (rows.steal == 0.3).all()


def test_no_retake_where_steal_is_not_known(tmp_path, monkeypatch):
    from sampling import runner

    monkeypatch.setattr(runner, "steal_share", lambda before, after: float("nan"))
    ended, rows, retaken, keys = _loop(tmp_path, monkeypatch, lambda n: [0.5] * n, retakes=2)
    assert retaken == [] and len(rows) == len(keys) * 3 and rows.steal.isna().all()


@pytest.mark.parametrize("setting, field", [("sampling.steal_retakes=-1", "sampling.steal_retakes"),
                                            ("sampling.max_steal=1.5", "sampling.max_steal")])
def test_bad_steal_settings_name_the_field(setting, field):
    from predictor.app.config import load_config
    from predictor.core.profiles import load_hardware, section
    from predictor.core.specs import SamplingConfig
    from sampling.plan import make_plan

    with pytest.raises(PrismError) as err:
        make_plan(section(load_config([setting]), "sampling", SamplingConfig), load_hardware("local-cpu"))
    assert err.value.field == field


def _measured(steal, layout="a", steps=3):
    return pd.DataFrame({"layout_id": layout, "hardware": "local-cpu", "model_json": "{}", "parallel_json": "{}",
                         "step": range(steps), "rank": 0, "step_time_s": [1.0, 1.1, 1.2][:steps],
                         "threads_per_rank": 1, "backend": "gloo", "measured_at": "2026-11-28T00:00:00",
                         **({"steal": steal} if steal is not None else {})})


def test_measured_steps_keep_their_steal_and_older_files_without_it_still_read(tmp_path):
    path = write_measurements(_measured(None), tmp_path / "m.parquet")
    assert read_measurements(path).steal.isna().all()  # written before steal was recorded: empty, not an error
    write_measurements(_measured([0.0, 0.02, None], layout="b"), path)
    frame = read_measurements(path)
    assert set(frame.layout_id) == {"a", "b"}
    assert step_times(frame).set_index(["layout_id", "step"]).steal.loc["b"].tolist()[:2] == [0.0, 0.02]
    table = pass_repeatability([frame[frame.layout_id == "b"], frame[frame.layout_id == "b"]])
    assert table.pass1_steal.iloc[0] == pytest.approx(0.01)


def test_a_steal_column_of_other_things_is_refused(tmp_path):
    path = tmp_path / "m.parquet"
    _measured([0.0, 3.0, 0.1]).to_parquet(path)
    with pytest.raises(PrismError, match="column 'steal'"):
        read_measurements(path)


def test_validate_leaves_the_disturbed_steps_out_and_says_so():
    from predictor.analyses.validate import validate
    from predictor.latency.artifacts import ModelSet, models_dir
    from tests.conftest import ROOT

    frame = read_measurements(ROOT / "measurements" / "local-cpu-suite.parquet")
    one = frame[frame.layout_id == frame.layout_id.iloc[0]].copy()
    steps = sorted(one.step.unique())
    # the three slowest steps timed under steal: left out, the rest scored
    slow = set(step_times(one).nlargest(3, "step_time_s").step)
    one["steal"] = one.step.map(lambda s: 0.2 if s in slow else 0.0)
    models = ModelSet.load(models_dir() / "local-cpu", "local-cpu")
    kept = validate(one, "local-cpu", models, draws=200).scores[0]
    everything = validate(one.assign(steal=0.0), "local-cpu", models, draws=200).scores[0]
    assert (kept.steps, everything.steps) == (len(steps) - 3, len(steps))
    assert kept.measured_p50_s <= everything.measured_p50_s
    assert any("3 step(s) timed while the hypervisor took over 5%" in n for n in kept.notes)
    assert not any("steal" in n for n in everything.notes)


def test_undisturbed_keeps_every_step_of_a_layout_disturbed_throughout():
    from predictor.data.measurements import undisturbed

    steps = pd.DataFrame({"layout_id": ["a"] * 4 + ["b"] * 3, "step": [0, 1, 2, 3, 0, 1, 2],
                          "steal": [0.0, 0.5, None, 0.05, 0.5, 0.2, 0.3]})
    kept = undisturbed(steps)
    assert kept[kept.layout_id == "a"].step.tolist() == [0, 2, 3]  # unknown and at the limit count as left alone
    assert kept[kept.layout_id == "b"].step.tolist() == [0, 1, 2]  # none left alone: still scored, on every step
    assert len(undisturbed(steps.drop(columns="steal"))) == len(steps)


def test_measure_times_a_step_in_place_of_each_disturbed_one_within_its_allowance():
    pytest.importorskip("torch")
    from sampling.reference import another_step

    job = {"warmup": 2, "steps": 3, "steal_retakes": 2, "max_steal": 0.05}
    assert another_step(4, [0.0, 0.0], job)  # the planned steps first
    assert not another_step(5, [0.0, float("nan"), 0.05], job)  # three left alone (unknown, at the limit)
    assert another_step(5, [0.0, 0.3, 0.0], job)  # one disturbed: one more
    assert not another_step(6, [0.0, 0.3, 0.0, 0.0], job)
    assert not another_step(7, [0.3] * 5, job)  # the allowance spent
    assert not another_step(5, [0.3] * 3, {**job, "steal_retakes": 0})


def test_measure_progress_bar_grows_by_the_steps_timed_in_place_of_disturbed_ones(tmp_path):
    import io

    from tqdm import tqdm

    from sampling.launch import _show

    with tqdm(total=5, file=io.StringIO()) as bar:
        for done, total in ((3, 5), (5, 5), (7, 7)):
            (tmp_path / "progress").write_text(str(done))
            _show(bar, tmp_path)
            assert (bar.n, bar.total) == (done, total)

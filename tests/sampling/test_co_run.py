"""A rank's ops beside a neighbouring rank on its host (sampling.co_run, latency.co_run,
decompose.neighbours): real timings on this CPU, how training stores the slowdown, where
the composer applies it."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from predictor.app.config import load_config
from predictor.core.ops import OPS, Call
from predictor.core.profiles import load_hardware, load_model, section
from predictor.core.specs import ParallelConfig, RegressorConfig, SamplingConfig
from predictor.data import store
from predictor.latency.adjustments.co_run import slowdowns
from predictor.latency.artifacts import ModelSet, models_dir, train
from predictor.latency.evaluate import evaluate
from predictor.latency.lookup import call_quantiles
from predictor.latency.origins import CO_RUN_ALONE as ALONE
from predictor.latency.origins import CO_RUN_BESIDE as BESIDE
from predictor.latency.origins import CO_RUN_ORIGINS as ORIGINS
from predictor.workload.decompose import decompose

PLAN = ["sampling.budget_s=120", "sampling.threads=1", "sampling.repeats=3", "sampling.shapes_per_op=3",
        "sampling.targets=[tiny]", "sampling.micro_batch_sizes=[1]", "sampling.tp_degrees=[1,2]",
        "sampling.flush_every_s=0", "sampling.ops=[gemm,swiglu]", "sampling.co_run_share=0.5"]


@pytest.mark.slow
def test_targeted_shapes_are_timed_alone_and_beside_a_training_rank_and_train_stores_the_slowdown(tmp_path, cpu_env):
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-m", "predictor.app.cli", "sample", *PLAN, f"output_dir={tmp_path}",
                          "--json"], env=cpu_env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["remaining_tasks"] == 0
    df = store.read_samples(tmp_path)
    df = df.fillna({c: 0 for c in ("m", "n", "k", "tokens", "hidden")})  # a shape's key: no NaN
    co = df[df.origin.isin(ORIGINS)]
    assert set(co.op) == {"gemm", "swiglu"}
    cols = ["op", "pass", "m", "n", "k", "tokens", "hidden"]
    alone = co[co.origin == ALONE].groupby(cols, dropna=False).size()
    beside = co[co.origin == BESIDE].groupby(cols, dropna=False).size()
    assert alone.index.equals(beside.index) and (alone == 3).all() and (beside == 3).all()
    planned = set(df[df.origin == "sampled"].set_index(cols).index)
    assert set(alone.index) <= planned  # the plan's own (targeted) shapes
    from sampling.runner import CO_RUN_TASK, _complete, _stored_counts
    three = SimpleNamespace(repeats=3, collective_repeats=3)  # the settings _complete reads
    stored = store.read_samples(tmp_path)
    assert CO_RUN_TASK in _complete(_stored_counts(stored), three)  # a resumed run does not time the phase again
    # and its rows are no plan task's repeats: the plan's own rows alone make a task done
    assert _complete(_stored_counts(stored[stored.origin.isin(ORIGINS)]), three) == {CO_RUN_TASK}

    hw = load_hardware("local-cpu")
    models = train(df, hw, section(load_config([]), "regressor", RegressorConfig), n_jobs=1)
    stored = models.manifest["adjustments"]["co_run"]["params"]["slowdowns"]
    assert stored == slowdowns(df)
    assert set(stored) == {"gemm/fwd", "gemm/bwd", "swiglu/fwd", "swiglu/bwd"}
    assert all(v["slowdown"] > 0 and v["shapes"] >= 2 for v in stored.values())
    assert models.manifest["samples"]["rows"] == int((~df.origin.isin(ORIGINS)).sum())  # not the models' rows
    scored = evaluate(models, df)
    assert scored.rows.sum() == models.manifest["samples"]["rows"]  # nor the rows prism evaluate scores


def test_the_phase_takes_each_compute_op_s_longest_targeted_shapes_in_turns():
    pytest.importorskip("torch")
    from sampling.cpu.co_run import CALL_CAP_MS, TASKS_PER_OP, co_run_tasks
    from sampling.plan import call_seconds, make_plan, target_calls
    sc = section(load_config(["sampling=quick"]), "sampling", SamplingConfig)
    hw = load_hardware("local-cpu")
    plan = make_plan(sc, hw)
    chosen = co_run_tasks(plan.compute + plan.collectives, target_calls(sc, hw), hw)
    per_op = Counter((t.call.op, t.call.pass_) for t in chosen)
    assert max(per_op.values()) == TASKS_PER_OP and not any(OPS[op].collective for op, _ in per_op)
    ms = {t.key: call_seconds(t.call.op, t.call.pass_, t.call.shape_dict, t.dtype, hw) * 1e3 for t in plan.compute}
    assert all(ms[t.key] <= CALL_CAP_MS for t in chosen)
    gemms = [t for t in chosen if t.call.op == "gemm" and t.call.pass_ == "fwd"]
    assert [ms[t.key] for t in gemms] == sorted((ms[t.key] for t in gemms), reverse=True)
    first = chosen[:len(per_op)]  # every op's longest before any op's second
    assert Counter((t.call.op, t.call.pass_) for t in first) == Counter(dict.fromkeys(per_op, 1))


def test_the_slowdown_is_the_median_over_shapes_of_beside_over_alone():
    def rows(m, origin, latencies):
        return [{"op": "gemm", "pass": "fwd", "m": m, "n": 64, "k": 64, "dtype": "float32", "run_id": "r",
                 "origin": origin, "latency_us": us} for us in latencies]
    df = pd.DataFrame(rows(32, ALONE, [10, 10, 11]) + rows(32, BESIDE, [12, 13, 12])
                      + rows(64, ALONE, [20, 20, 20]) + rows(64, BESIDE, [30, 31, 29])
                      + rows(128, ALONE, [40, 41]) + rows(128, "sampled", [40]))  # no twin: not counted
    assert slowdowns(df) == {"gemm/fwd": {"slowdown": round((12 / 10 + 30 / 20) / 2, 4), "shapes": 2}}
    assert slowdowns(df[df.m == 32]) == {}  # one shape is not enough


def _layout(hardware, **par):
    return decompose(load_model("tiny"), ParallelConfig(**par), load_hardware(hardware))


@pytest.mark.parametrize("par", [{"dp": 2, "global_batch_size": 8}, {"tp": 2}, {"pp": 2, "global_batch_size": 8}])
def test_a_cpu_rank_beside_another_marks_every_call_but_the_collectives(par):
    work = _layout("local-cpu", **par)
    calls = [c for st in work.stages for c in st.forward + st.backward + st.step]
    marked = [c.shape_dict.get("co_runners") for c in calls]
    assert all(m == 1 for c, m in zip(calls, marked) if not OPS[c.op].collective)
    assert all(m is None for c, m in zip(calls, marked) if OPS[c.op].collective)


@pytest.mark.parametrize("hardware, par", [("local-cpu", {}), ("h100-sxm", {"dp": 8, "global_batch_size": 32})])
def test_one_rank_on_a_cpu_and_gpu_ranks_are_alone(hardware, par):
    work = _layout(hardware, **par)
    assert not any("co_runners" in c.shape_dict for st in work.stages for c in st.forward + st.backward + st.step)


def test_the_lookup_scales_a_marked_call_by_its_op_s_slowdown_only():
    hw = load_hardware("local-cpu")
    models = ModelSet.load(models_dir() / "local-cpu", hw)
    models.manifest = {**models.manifest, "co_run": {"gemm/fwd": {"slowdown": 1.5, "shapes": 3}}}
    gemm = (("k", 128), ("m", 128), ("n", 384))
    calls = [Call("gemm", "fwd", gemm), Call("gemm", "fwd", tuple(sorted((*gemm, ("co_runners", 1))))),
             Call("rmsnorm", "fwd", (("hidden", 128), ("tokens", 128))),
             Call("rmsnorm", "fwd", (("co_runners", 1), ("hidden", 128), ("tokens", 128)))]
    q, _ = call_quantiles(calls, models, hw, "float32")
    np.testing.assert_allclose(q[1] / q[0], 1.5)
    np.testing.assert_allclose(q[3], q[2])  # no slowdown sampled for it: as timed alone


def test_a_plan_without_the_targets_compute_has_no_co_run_phase():
    # sampling.ops=[all_reduce]: the phase had nothing to time, so its task stayed "still to do"
    # and every run of the plan ended "budget", asking for a larger budget
    torch = pytest.importorskip("torch")
    from sampling.plan import make_plan
    from sampling.runner import _co_run_work
    hw = load_hardware("local-cpu")
    collectives = section(load_config(["sampling.ops=[all_reduce]"]), "sampling", SamplingConfig)
    assert _co_run_work(collectives, hw, make_plan(collectives, hw), torch.device("cpu")) == ([], [])
    both = section(load_config(["sampling.ops=[gemm,all_reduce]"]), "sampling", SamplingConfig)
    tasks, targets = _co_run_work(both, hw, make_plan(both, hw), torch.device("cpu"))
    assert {t.call.op for t in tasks} == {"gemm"} and targets  # on a host of several ranks with a spare core


@pytest.mark.slow
def test_ctrl_c_leaves_the_neighbour_to_its_parent_without_a_traceback(capfd):
    """Ctrl-C reaches the whole process group: the neighbour, importing torch or training,
    outlives it without a traceback of its own, and the parent stops it on its way out."""
    pytest.importorskip("torch")
    from sampling.cpu.co_run import Neighbour
    neighbour, done = Neighbour(["tiny"]), threading.Event()

    def ctrl_c():  # from the neighbour's first moments (its imports) to its training
        while not done.is_set():
            if neighbour._proc.pid is not None:
                os.kill(neighbour._proc.pid, signal.SIGINT)
            time.sleep(0.05)

    sender = threading.Thread(target=ctrl_c)
    sender.start()
    try:
        with neighbour:
            timer = SimpleNamespace(time=lambda fn, repeats, warmup, host: time.sleep(0.5) or [1.0])
            neighbour.origins(None, timer, 1, 0, False)  # half a second of training beside it
            done.set()  # no signal to a process stopped and gone
            sender.join()
    finally:
        done.set()
    assert neighbour._proc.exitcode == 0  # it left its loop at the parent's stop: neither killed nor a traceback
    err = capfd.readouterr().err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err

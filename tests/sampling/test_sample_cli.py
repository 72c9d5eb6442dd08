"""`prism sample` end to end: real timings on this CPU, interruption, resume, bad input."""
import hashlib
import json
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")

from predictor.app.cli import main  # noqa: E402
from predictor.data import store  # noqa: E402

SMALL_PLAN = ["sampling.budget_s=120", "sampling.threads=1", "sampling.repeats=10", "sampling.collective_repeats=12",
              "sampling.shapes_per_op=3", "sampling.message_sizes=2", "sampling.targets=[tiny]",
              "sampling.micro_batch_sizes=[1]", "sampling.tp_degrees=[1]", "sampling.flush_every_s=0",
              "sampling.co_run_share=0"]  # the co-run phase: tests/sampling/test_co_run.py


def _prism(args, env, **kw):
    return subprocess.run([sys.executable, "-m", "predictor.app.cli", *args], env=env,
                          capture_output=True, text=True, **kw)


@pytest.mark.slow
def test_sample_writes_every_repeat_with_the_contract_columns(tmp_path, cpu_env):
    # no call timed again under steal: a retake comes after the last round and would blur the rounds' order
    out = _prism(["sample", *SMALL_PLAN, "sampling.ops=[gemm,rmsnorm,all_reduce,send_recv]", "sampling.steal_retakes=0",
                  f"output_dir={tmp_path}", "--json"], cpu_env, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["status"] == "complete" and report["remaining_tasks"] == 0
    df = store.read_samples(tmp_path)
    assert {"op", "pass", "latency_us", "repeat", "hardware"} <= set(df.columns)
    assert set(df.op) == {"gemm", "rmsnorm", "all_reduce", "send_recv"}
    assert (df.latency_us > 0).all() and (df.hardware == "local-cpu").all()
    per_task = df.groupby(["op", "pass", "m", "n", "k", "tokens", "hidden", "message_bytes", "origin"],
                          dropna=False).size()
    collective = per_task.index.get_level_values("op").isin(["all_reduce", "send_recv"])
    own = per_task.index.get_level_values("origin") == "sampled"
    # a CPU's collective: its 12 repeats, and 4 after each shorter gap (predictor.latency.collective_gap)
    assert (per_task[~collective] == 10).all() and (per_task[collective & own] == 12).all()
    assert (per_task[collective & ~own] == 4).all() and (~own).sum() == 2 * 2 * 2  # 2 ops x 2 sizes x 2 gaps
    coll = df[df.op == "all_reduce"]
    assert (coll.world_size == 2).all() and (coll.backend == "gloo").all()
    assert coll.message_bytes.nunique() == 2
    # the quick plan's 3 rounds: each compute shape's repeats 0-9 in 4 + 3 + 3, one pass over every shape after another
    compute = df[~df.op.isin(["all_reduce", "send_recv"])]
    shape = ["op", "pass", "m", "n", "k", "tokens", "hidden"]
    assert (compute.groupby(shape, dropna=False).repeat.agg(sorted).map(tuple) == tuple(range(10))).all()
    rounds = compute.groupby(shape, dropna=False).timestamp.agg(lambda t: sorted(t.unique()))
    assert (rounds.map(len) == 3).all()
    assert all(max(r[i] for r in rounds) < min(r[i + 1] for r in rounds) for i in (0, 1))
    meta = store.read_run_metadata(report["run_file"])
    assert meta["repeats"] == 10 and meta["collective_repeats"] == 12
    assert meta["versions"]["torch"] and meta["calibration"]["matmul_flops"] > 0


@pytest.mark.slow
def test_a_cpu_s_framework_time_is_sampled_once_per_store(tmp_path, cpu_env):
    """With dispatch in the plan, a CPU run also samples the reference model's framework
    time in situ (sampling.framework); a store that holds it does not sample it again."""
    args = ["sample", *SMALL_PLAN, "sampling.ops=[dispatch]", "sampling.repeats=2", f"output_dir={tmp_path}", "--json"]
    out = _prism(args, cpu_env, timeout=300)
    assert out.returncode == 0, out.stderr
    df = store.read_samples(tmp_path)
    framework = df[df.origin == "framework"]
    assert set(framework.op) == {"dispatch", "checkpoint"} and set(framework["pass"]) == {"fwd", "bwd"}
    assert (framework[framework.op == "checkpoint"].blocks > 0).all()  # one row per recomputed step and pass
    assert (df[df.origin == "sampled"].op == "dispatch").all()
    again = json.loads(_prism(args, cpu_env, timeout=300).stdout)
    assert again["status"] == "nothing-to-do" and len(store.run_files(tmp_path)) == 1


def _ctrl_c_default():
    """A test's prism process takes Ctrl-C as a user's does: a process started in the
    background, as a test worker may be, inherits SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_after_first_part(args, out_dir, env):
    """Start ``prism sample``, send SIGINT once its first part is written; (returncode, stdout,
    whether the run had already ended when the signal went). A CI machine can stall this process
    for seconds while the run goes on, so a run that finished first is told apart from a lost
    signal by its file's time."""
    proc = subprocess.Popen([sys.executable, "-m", "predictor.app.cli", *args, f"output_dir={out_dir}"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            preexec_fn=_ctrl_c_default)
    deadline = time.time() + 120
    while (not list(out_dir.glob(".*.parts/part-*.parquet")) and proc.poll() is None
           and time.time() < deadline):
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    sent = time.time()
    stdout, _ = proc.communicate(timeout=120)
    finished_first = proc.returncode == 0 and all(p.stat().st_mtime < sent for p in store.run_files(out_dir))
    return proc.returncode, stdout, finished_first


@pytest.mark.slow
def test_interrupted_run_resumes_without_losing_a_row(tmp_path, cpu_env):
    shapes = 18  # about 11 s of plan after the first part is written
    args = ["sample", *SMALL_PLAN, f"sampling.shapes_per_op={shapes}", "sampling.ops=[gemm,attention,layernorm]"]
    for attempt in range(3):  # again only where the run provably ended before the signal went
        out_dir = tmp_path / f"attempt-{attempt}"
        out_dir.mkdir()
        returncode, stdout, finished_first = _interrupt_after_first_part(args, out_dir, cpu_env)
        if not finished_first:
            break
    tmp_path, args = out_dir, [*args, f"output_dir={out_dir}"]
    assert returncode == 130, stdout
    assert "interrupted" in stdout
    [first] = store.run_files(tmp_path)
    kept = store.read_samples(first)
    digest = hashlib.md5(first.read_bytes()).hexdigest()
    assert len(kept) >= 4  # a shape's first round at least

    out = _prism([*args, "--json"], cpu_env, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["status"] == "complete"
    assert report["rows"] == shapes * 2 * 3 * 10 - len(kept)  # only the repeats the first run had not stored
    assert report["resumed_repeats"] + 10 * report["resumed_tasks"] == len(kept)  # what was found, said
    assert hashlib.md5(first.read_bytes()).hexdigest() == digest  # the old run is untouched
    df = store.read_samples(tmp_path)
    cols = ["op", "pass", "m", "n", "k", "batch", "heads", "seq_q", "head_dim", "causal",
            "tokens", "hidden"]
    per_task = df.groupby(cols, dropna=False).size()
    assert (per_task == 10).all(), "a task was measured twice or lost repeats"
    # a shape cut off between its rounds got only the repeats it lacked, numbered on from its stored ones
    assert (df.groupby(cols, dropna=False).repeat.agg(sorted).map(tuple) == tuple(range(10))).all()
    assert len(per_task) == shapes * 2 * 3  # shapes x fwd/bwd x 3 ops

    again = _prism([*args, "--json"], cpu_env, timeout=120)
    assert json.loads(again.stdout)["status"] == "nothing-to-do"


@pytest.mark.slow
def test_an_interrupted_collective_job_keeps_its_rows(tmp_path, cpu_env):
    # sizes of 32-64 MiB: each a block of its own (sampling.collectives.BLOCK_BYTES), written when timed
    args = ["sample", *SMALL_PLAN, "sampling.ops=[all_reduce]", "sampling.message_sizes=30",
            "sampling.space.message_bytes=[33554432,67108864]", "sampling.collective_repeats=18",
            f"output_dir={tmp_path}"]
    proc = subprocess.Popen([sys.executable, "-m", "predictor.app.cli", *args], env=cpu_env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            preexec_fn=_ctrl_c_default)
    deadline = time.time() + 120
    while not list(tmp_path.glob(".*.parts/collective-0-*.parquet")) and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # to prism alone: it passes the signal on to torchrun
    stdout, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in stdout, stdout
    kept = store.read_samples(tmp_path)
    own = kept.origin == "sampled"  # and 6 repeats after each shorter gap (predictor.latency.collective_gap)
    assert set(kept.op) == {"all_reduce"} and (kept[own].groupby("message_bytes").size() == 18).all()
    assert (kept[~own].groupby(["message_bytes", "origin"]).size() == 6).all()
    assert 1 <= kept.message_bytes.nunique() < 30


@pytest.mark.slow
def test_a_spent_budget_is_reported_with_what_is_left(tmp_path, cpu_env):
    out = _prism(["sample", *SMALL_PLAN, "sampling.budget_s=1", "sampling.ops=[all_reduce,gemm]",
                  f"output_dir={tmp_path}"], cpu_env, timeout=120)
    assert out.returncode == 0, out.stderr  # a budget stop resumes: no error
    assert "status       budget" in out.stdout and "larger sampling.budget_s" in out.stdout
    # the collectives' torchrun outlasts a 1 s budget: a report of 0 rows says why, and how much to give
    assert "rows         0" in out.stdout
    assert "note: no row stored: sampling.budget_s=1 ran out during start-up" in out.stderr
    assert "sampling.budget_s=60 or more" in out.stderr and "same output_dir" in out.stderr


@pytest.mark.parametrize("override, message", [
    ("sampling.ops=[gemm,flash_conv]", "sampling.ops: unknown op 'flash_conv'"),
    ("sampling.repeats", "malformed override 'sampling.repeats'"),
    ("sampling.repeats=ten", "sampling.repeats"),
])
def test_bad_input_exits_nonzero_with_one_message(tmp_path, capsys, override, message):
    (tmp_path / "keep.txt").write_text("stored data")
    assert main(["sample", override, f"output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("prism sample: error:") and message in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_more_threads_than_this_process_s_cores_stop_before_any_work(tmp_path, capsys, monkeypatch):
    """Threads beyond the cores this process may use time each other, not the op: refused,
    naming the setting, the cores and the fix, as prism measure refuses its ranks'."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert main(["sample", "sampling.threads=3", f"output_dir={tmp_path / 'store'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("prism sample: error: sampling.threads=3: needs 3 cores, this machine has 2")
    assert "sampling.threads=2 or fewer" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "store").exists()


def test_a_gpu_plan_s_collectives_need_a_gpu_per_rank(tmp_path, capsys, monkeypatch):
    """sampling=gpu times its collectives on 8 ranks; on a host with fewer GPUs it stops
    before any work, naming the setting and both fixes."""
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert main(["sample", "hardware=h200", "sampling=gpu", f"output_dir={tmp_path / 'store'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("prism sample: error: sampling.collective_world_size=8") and len(err.splitlines()) == 1
    assert "sampling.ops" in err and not (tmp_path / "store").exists()


def test_a_cpu_s_collectives_need_a_core_per_rank(tmp_path, capsys, monkeypatch):
    """16 ranks on 2 cores ran out of the budget in start-up, and the note blamed the budget."""
    monkeypatch.setattr("sampling.runner.usable_cores", lambda: 2)
    assert main(["sample", "sampling.ops=[all_reduce]", "sampling.collective_world_size=16",
                 f"output_dir={tmp_path / 'store'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("prism sample: error: sampling.collective_world_size=16: one core per rank")
    assert "set it to 2 or fewer" in err and len(err.splitlines()) == 1 and not (tmp_path / "store").exists()


def test_a_truncated_file_in_the_store_stops_sampling_and_is_left_intact(tmp_path, capsys):
    w = store.RunWriter(tmp_path, "earlier", {})
    from datetime import datetime, timezone
    w.add([dict(op="gemm", **{"pass": "fwd"}, dtype="float32", m=8, n=8, k=8, latency_us=1.0,
                repeat=0, hardware="local-cpu", timestamp=datetime.now(timezone.utc))])
    good = w.close()
    bad = tmp_path / "cut.parquet"
    bad.write_bytes(good.read_bytes()[:300])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert main(["sample", *SMALL_PLAN, f"output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "cut.parquet: not a readable Parquet file" in err and "truncated or corrupt" in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_second_run_into_a_store_being_written_stops_with_one_error(tmp_path, capsys):
    with store.writer_lock(tmp_path):
        assert main(["sample", *SMALL_PLAN, f"output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("prism sample: error: output_dir=")
    assert "another prism sample is writing into this store" in err and ".writer.lock" in err
    assert list(tmp_path.iterdir()) == []  # nothing measured, and the lock went with its holder


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped interrupt, on purpose
def test_a_ctrl_c_python_drops_still_stops_the_compute_loop(tmp_path):
    """Python drops a KeyboardInterrupt raised while it runs a destructor ("Exception ignored
    in ..."); the runner remembers the Ctrl-C and stops before its next timed call."""
    from predictor.app.config import load_config
    from predictor.core.profiles import load_hardware, section
    from predictor.core.specs import SamplingConfig
    from sampling import runner
    from sampling.plan import make_plan

    class SignalsOnCollection:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)

    sc = section(load_config(["sampling.ops=[gemm]", "sampling.shapes_per_op=2"]), "sampling", SamplingConfig)
    plan = make_plan(sc, load_hardware("local-cpu"))
    timed = []

    class Timer:
        def time(self, fn, repeats, warmup, host=False):
            timed.append(fn)
            return [1.0] * repeats

    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)  # a test worker may ignore Ctrl-C
    try:
        with runner._remembered_interrupts():
            SignalsOnCollection()  # the interrupt raised as it is collected is dropped, not raised here
            with pytest.raises(KeyboardInterrupt):
                runner._compute_loop(plan.compute, sc, runner._device(load_hardware("local-cpu")), Timer(),
                                     store.RunWriter(tmp_path, "run", {}), {"origin": "sampled"}, time.time() + 60,
                                     [], progress=False)
        assert not timed and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, inherited)

"""A cluster sampled as one distributed job: 2 emulated nodes x 2 ranks on this host, under
torchrun (two agents, c10d rendezvous) and under a SLURM-like environment (the variables srun
sets, by hand); a rank killed or hung mid-run; what the ranks' environment says."""
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")

from predictor.app.config import load_config  # noqa: E402
from predictor.core.errors import PrismError  # noqa: E402
from predictor.core.ops import OPS  # noqa: E402
from predictor.core.profiles import load_hardware, section  # noqa: E402
from predictor.core.specs import SamplingConfig  # noqa: E402
from predictor.data import store  # noqa: E402
from predictor.latency.origins import GAPS_S  # noqa: E402
from predictor.latency.origins import gap_origin as origin_of  # noqa: E402
from sampling.collectives import BLOCK_BYTES, blocks  # noqa: E402
from sampling.launch import SLURM_PORT_BASE, cluster_env  # noqa: E402
from sampling.plan import group_shapes, make_plan  # noqa: E402
from sampling.runner import _complete, _done_tasks  # noqa: E402

REPEATS = 3
GAP_REPEATS = 1  # a third as many after each shorter gap
#: A tiny plan: two compute ops at two shapes each, two collectives at two sizes over the 3
#: group shapes of 2 x 2 ranks; ranks flush after every task.
TINY = ["hardware=local-cpu", "sampling.ops=[gemm,layernorm,all_reduce,send_recv]", "sampling.shapes_per_op=2",
        f"sampling.repeats={REPEATS}", f"sampling.collective_repeats={REPEATS}", "sampling.warmup=1",
        "sampling.message_sizes=2",
        "sampling.space.message_bytes=[1024,65536]", "sampling.targets=[tiny]", "sampling.micro_batch_sizes=[1]",
        "sampling.tp_degrees=[1]", "sampling.flush_every_s=0", "sampling.budget_s=300"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(cpu_env, **extra):
    env = {k: v for k, v in cpu_env.items() if not k.startswith(("SLURM_", "MASTER_", "RANK", "WORLD_SIZE",
                                                                   "LOCAL_", "GROUP_RANK"))}
    return {**env, **{k: str(v) for k, v in extra.items()}}


def _slurm_job(out: Path, cpu_env, overrides=(), port=None) -> list[subprocess.Popen]:
    """4 tasks as `srun --nodes=2 --ntasks-per-node=2 prism sample ...` starts them."""
    port = port or _port()
    procs = []
    for r in range(4):
        env = _env(cpu_env, SLURM_PROCID=r, SLURM_NTASKS=4, SLURM_LOCALID=r % 2, SLURM_NODEID=r // 2,
                   SLURM_NNODES=2, SLURM_TASKS_PER_NODE="2(x2)", SLURM_JOB_ID=4242,
                   SLURM_LAUNCH_NODE_IPADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, "-m", "predictor.app.cli", "sample", *TINY, *overrides,
                                       f"output_dir={out}"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    return procs


def _torchrun_job(out: Path, cpu_env, overrides=()) -> list[subprocess.Popen]:
    """Two torchrun agents (two emulated nodes of 2 ranks), rendezvous at one endpoint."""
    port = _port()
    procs = []
    for node in range(2):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=2",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id=prism-{port}",
               f"--rdzv-conf=is_host={int(node == 0)}", "--no-python", sys.executable, "-m", "predictor.app.cli",
               "sample", *TINY, *overrides, f"output_dir={out}"]
        procs.append(subprocess.Popen(cmd, env=_env(cpu_env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, start_new_session=True))
    return procs


def _finish(procs, timeout=120) -> list[tuple[int, str]]:
    return [(p.wait(timeout=timeout), p.stdout.read()) for p in procs]


def _check_rows_once(out: Path, ranks=range(4), shapes=2) -> pd.DataFrame:
    """Every rank's compute tasks and every collective task of the plan, each REPEATS rows, none twice."""
    df = store.read_samples(out)
    assert not list(out.glob(".*.parts")), "a run was left unjoined"
    compute = df[~df["op"].map(lambda op: OPS[op].collective)]
    coll = df[df["op"].map(lambda op: OPS[op].collective)]
    shape = ["m", "n", "k", "tokens", "hidden"]
    per_rank = compute.groupby(["rank", "op", "pass", *shape], dropna=False)["repeat"]
    assert (per_rank.size() == REPEATS).all() and (per_rank.nunique() == REPEATS).all()
    assert sorted(compute["rank"].unique()) == list(ranks)
    # every rank timed the same compute tasks: 2 ops x shapes x (fwd, bwd)
    assert set(compute.groupby("rank").size()) == {2 * shapes * 2 * REPEATS}
    # a CPU's collective: REPEATS rows of its own and the gap curve's (predictor.latency.collective_gap), each once
    per_task = coll.groupby(["op", "message_bytes", "group_size", "nodes", "ranks_per_node", "origin"])["repeat"]
    origins = per_task.size().index.get_level_values("origin")
    expected = np.where(origins == "sampled", REPEATS, GAP_REPEATS)
    assert (per_task.size().to_numpy() == expected).all() and (per_task.nunique().to_numpy() == expected).all()
    assert set(coll["origin"]) == {"sampled", *map(origin_of, GAPS_S)}
    placements = set(zip(coll["nodes"], coll["ranks_per_node"]))
    assert placements == {(1, 2), (2, 1), (2, 2)} == set(group_shapes(2, 2))
    assert len(per_task) == 2 * 3 * 2 * (1 + len(GAPS_S))  # 2 collectives x 3 group shapes x 2 sizes, by origin
    assert (df["world_size"] == 4).all()
    return df


def _meta(out: Path) -> list[dict]:
    return [store.read_run_metadata(f) for f in store.run_files(out)]


@pytest.mark.slow
def test_torchrun_job_of_two_emulated_nodes_stores_every_rank_once(tmp_path, cpu_env):
    results = _finish(_torchrun_job(tmp_path, cpu_env))
    assert [rc for rc, _ in results] == [0, 0], results
    _check_rows_once(tmp_path)
    [meta] = _meta(tmp_path)
    assert meta["cluster"]["launcher"] == "torchrun" and meta["cluster"]["nodes"] == 2
    assert [(r["rank"], r["node"], r["status"]) for r in meta["ranks"]] == [
        (0, 0, "end-of-plan"), (1, 0, "end-of-plan"), (2, 1, "end-of-plan"), (3, 1, "end-of-plan")]
    assert "status       complete" in results[0][1] or "status       complete" in results[1][1]


def _wait_for_rows(out: Path, rank: int, procs, timeout=90) -> int:
    """Until ``rank`` has flushed at least one part of its compute ops; its pid."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        for parts in out.glob(".*.parts"):
            rec = store.rank_records(parts).get(rank)
            if rec and rec["phase"] == "compute" and rec["rows"] > 0:
                return rec["pid"]
        time.sleep(0.02)
    for p in procs:
        p.kill()
    pytest.fail(f"rank {rank} flushed no compute row in {timeout} s: {_finish(procs)}")


@pytest.mark.slow
def test_a_rank_killed_mid_run_leaves_a_store_that_resumes_without_duplicates(tmp_path, cpu_env):
    slow = ["sampling.shapes_per_op=6", "sampling.rank_timeout_s=8"]
    agents = _torchrun_job(tmp_path, cpu_env, slow)
    os.kill(_wait_for_rows(tmp_path, 2, agents), signal.SIGKILL)
    first = _finish(agents)
    assert any(rc != 0 for rc, _ in first)  # torchrun reports the killed rank
    before = store.read_samples(tmp_path) if store.run_files(tmp_path) else None
    again = _finish(_torchrun_job(tmp_path, cpu_env, slow))
    assert [rc for rc, _ in again] == [0, 0], again
    df = _check_rows_once(tmp_path, shapes=6)
    assert len(store.run_files(tmp_path)) == 2  # the killed run (joined) and the one that finished it
    if before is not None:
        assert len(df) > len(before)


@pytest.mark.slow
def test_a_hung_rank_is_reported_by_rank_and_host_and_the_rest_finish(tmp_path, cpu_env):
    """A SLURM-like job (the variables srun sets) with rank 3 stopped mid-run, then the same
    job again, which finishes the store with every rank's rows once."""
    procs = _slurm_job(tmp_path, cpu_env, ["sampling.rank_timeout_s=10"])
    _wait_for_rows(tmp_path, 3, procs)
    procs[3].send_signal(signal.SIGSTOP)  # hung: alive, silent
    try:
        rc0, text0 = _finish(procs[:3])[0]
    finally:
        procs[3].kill()
        procs[3].wait()
    assert rc0 == 1, text0
    assert f"rank 3 on host {socket.gethostname()} (node 1): silent for 10 s" in text0
    assert "status       incomplete" in text0
    df = store.read_samples(tmp_path)
    assert set(df["rank"].dropna().astype(int)) >= {0, 1, 2}
    [meta] = _meta(tmp_path)
    assert {r["rank"]: r["status"] for r in meta["ranks"]}[3] == "running"
    assert meta["cluster"]["launcher"] == "slurm"
    again = _finish(_slurm_job(tmp_path, cpu_env))
    assert [rc for rc, _ in again] == [0, 0, 0, 0], again
    assert "status       complete" in again[0][1] and "ranks        4 reported" in again[0][1]
    _check_rows_once(tmp_path)


#: One rank whose compute kernels raise (a bug, a broken device): run as that rank's command.
FAILING_RANK = """
import os, sys
import sampling.kernels as kernels
from predictor.app.cli import main
if os.environ["SLURM_PROCID"] == "3":
    def build(*args, **kwargs):
        raise ValueError("this rank's device is broken")
    kernels.build = build
sys.exit(main())
"""


@pytest.mark.slow
def test_a_failing_rank_is_reported_by_rank_and_host_and_the_rest_finish(tmp_path, cpu_env):
    port = _port()
    procs = []  # the SLURM-like job, every rank started through FAILING_RANK
    for r in range(4):
        env = _env(cpu_env, SLURM_PROCID=r, SLURM_NTASKS=4, SLURM_LOCALID=r % 2, SLURM_NODEID=r // 2,
                   SLURM_NNODES=2, SLURM_TASKS_PER_NODE="2(x2)", SLURM_JOB_ID=4242,
                   SLURM_LAUNCH_NODE_IPADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, "-c", FAILING_RANK, "sample", *TINY, f"output_dir={tmp_path}"],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    results = _finish(procs)
    assert [rc for rc, _ in results] == [1, 0, 0, 0], results
    text = results[0][1]
    assert (f"rank 3 on host {socket.gethostname()} (node 1): ValueError: this rank's device is broken" in text
            and "status       incomplete" in text)
    assert "rank 3: failed" in results[3][1]
    df = store.read_samples(tmp_path)
    compute = df[~df["op"].map(lambda op: OPS[op].collective)]
    assert sorted(compute["rank"].unique()) == [0, 1, 2]  # the others finished their compute ops
    assert {r["rank"]: r["status"] for r in _meta(tmp_path)[0]["ranks"]} == {
        0: "end-of-plan", 1: "end-of-plan", 2: "end-of-plan", 3: "failed"}


# -- the ranks' environment ------------------------------------------------------------------

def test_torchrun_variables_give_the_rank_its_node():
    cl = cluster_env({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
                      "GROUP_RANK": "1", "MASTER_ADDR": "n0", "MASTER_PORT": "29500"})
    assert (cl.rank, cl.world, cl.local_rank, cl.ranks_per_node, cl.node, cl.nodes, cl.launcher) == \
        (5, 8, 1, 4, 1, 2, "torchrun")
    assert cluster_env({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}) is None
    assert cluster_env({}) is None


def test_slurm_variables_give_the_rank_its_node_and_a_rendezvous():
    env = {"SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
           "SLURM_NNODES": "2", "SLURM_STEP_TASKS_PER_NODE": "8(x2)", "SLURM_LAUNCH_NODE_IPADDR": "10.0.0.1",
           "SLURM_JOB_ID": "123456"}
    cl = cluster_env(env)
    assert (cl.rank, cl.world, cl.local_rank, cl.ranks_per_node, cl.node, cl.nodes, cl.launcher) == \
        (9, 16, 1, 8, 1, 2, "slurm")
    assert SLURM_PORT_BASE == 20000


@pytest.mark.parametrize("env, field", [
    ({"RANK": "x", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}, "RANK"),
    ({"RANK": "0", "WORLD_SIZE": "6", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4"}, "LOCAL_WORLD_SIZE"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "3", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NNODES": "2",
      "SLURM_TASKS_PER_NODE": "2,1", "MASTER_ADDR": "n0"}, "SLURM_TASKS_PER_NODE"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NNODES": "2",
      "SLURM_TASKS_PER_NODE": "2(x2)"}, "MASTER_ADDR"),
])
def test_a_bad_launcher_environment_is_one_error_naming_the_variable(env, field):
    with pytest.raises(PrismError) as err:
        cluster_env(env)
    assert err.value.field == field and field in str(err.value)


def test_collectives_are_timed_in_blocks_of_one_op_and_group_that_fit_the_buffer_cap():
    """Sizes of one op and group share rounds until their buffers would pass BLOCK_BYTES; a
    new op, dtype or group shape starts a block; a message past the cap is a block alone."""
    def task(op, size, per_node=2, dtype="float32"):
        return {"op": op, "pass": "step", "dtype": dtype, "shape": {"message_bytes": size}, "nodes": 1,
                "ranks_per_node": per_node}
    small = [task("all_reduce", 1024 << i) for i in range(10)]  # 1 KiB .. 512 KiB: 2 MiB of buffers in all
    big = [task("all_reduce", BLOCK_BYTES // 4), task("all_reduce", BLOCK_BYTES // 4), task("all_reduce", BLOCK_BYTES)]
    pairs = [dict(task("dtensor", 0), shape={"group_size": 2}, **{"pass": p}) for p in ("fwd", "bwd")]  # no message
    tasks = small + big + [task("all_gather", 1024), task("all_gather", 1024, dtype="bfloat16"),
                           task("all_gather", 1024, per_node=4)] + pairs
    got = blocks(tasks)
    assert [t for b in got for t in b] == tasks  # every task once, in order
    assert [len(b) for b in got] == [11, 1, 1, 1, 1, 1, 1, 1]  # the first quarter-cap one joins the small sizes
    assert got[1] == [big[1]] and got[2] == [big[2]]
    assert all(2 * sum(t["shape"]["message_bytes"] for t in b) <= BLOCK_BYTES for b in got if len(b) > 1)


def test_a_cluster_resume_finds_the_dtensor_pairs_with_the_collectives_it_timed(tmp_path):
    """The collective job times dtensor pairs too; a cluster run's resume looked for their
    rows among the ranks' compute rows, so it timed them again and never reported done."""
    sc = section(load_config(["sampling.ops=[all_reduce,dtensor]", "sampling.message_sizes=2",
                              "sampling.collective_repeats=2"]), "sampling", SamplingConfig)
    plan = make_plan(sc, load_hardware("local-cpu"), (2, 2))
    writer = store.RunWriter(tmp_path, "cluster-run", {"plan_id": plan.plan_id})
    writer.add([{"op": t.call.op, "pass": t.call.pass_, "dtype": t.dtype, **t.call.shape_dict,
                 "nodes": t.call.nodes, "ranks_per_node": t.call.ranks_per_node, "hardware": "local-cpu",
                 "rank": 0, "latency_us": 10.0, "repeat": r, "origin": "sampled"}
                for t in plan.collectives for r in range(2)])
    writer.flush()
    writer.close()
    counts, _ = _done_tasks(tmp_path, plan, "local-cpu", by_rank=True)
    done = {r: _complete(c, sc) for r, c in counts.items()}
    assert {t.call.op for t in plan.collectives} == {"all_reduce", "dtensor"}
    assert {t.key for t in plan.collectives} <= done[-1] and not done.get(0)


def test_group_shapes_cover_within_and_across_nodes():
    assert group_shapes(2, 2) == [(1, 2), (2, 1), (2, 2)]
    assert group_shapes(4, 8) == [(1, 2), (1, 4), (1, 8), (2, 1), (2, 8), (4, 1), (4, 8)]
    assert group_shapes(1, 2) == [(1, 2)]
    assert group_shapes(3, 1) == [(2, 1), (3, 1)]


def test_the_cluster_plan_covers_every_collective_from_1_kib_to_1_gib():
    from omegaconf import OmegaConf

    from predictor.core.profiles import load_hardware
    from predictor.core.specs import SamplingConfig
    from sampling.plan import make_plan
    conf = Path(__file__).parents[2] / "conf" / "sampling"
    merged = OmegaConf.merge(OmegaConf.load(conf / "quick.yaml"),
                             {k: v for k, v in OmegaConf.load(conf / "cluster.yaml").items() if k != "defaults"})
    sc = SamplingConfig(**OmegaConf.to_object(merged))
    cov = make_plan(sc, load_hardware("h100-sxm"), (4, 8)).collective_coverage()
    assert cov["min_bytes"] == 1024 and cov["max_bytes"] == 1 << 30 and cov["sizes"] == 21
    assert cov["collectives"] == sorted(op for op, spec in OPS.items() if spec.collective)
    assert cov["group_shapes"] == ["1x2", "1x4", "1x8", "2x1", "2x8", "4x1", "4x8"]
    assert cov["tasks"] == 21 * 7 * len(cov["collectives"])


def test_collective_models_of_a_cluster_name_its_network_and_are_scored_per_topology():
    import numpy as np

    from predictor.app.config import load_config
    from predictor.core.profiles import load_hardware, section
    from predictor.core.specs import RegressorConfig
    from predictor.latency.artifacts import train
    from predictor.latency.evaluate import evaluate
    hw = load_hardware("local-cpu")
    rng = np.random.default_rng(0)
    rows = [{"op": "all_reduce", "pass": "step", "dtype": "float32", "message_bytes": 2 ** b, "group_size": n * k,
             "nodes": n, "ranks_per_node": k, "repeat": r, "rank": 0, "origin": "sampled",
             "latency_us": (50 * n + 2 ** b / 1e3) * np.exp(0.05 * rng.standard_normal())}
            for n, k in group_shapes(2, 2) for b in range(10, 24) for r in range(REPEATS)]
    samples = pd.DataFrame(rows).assign(hardware=hw.name, run_id="cluster")
    rc = section(load_config([]), "regressor", RegressorConfig)
    rc.params.update(n_estimators=10)
    models = train(samples, hw, rc, n_jobs=1)
    assert models.manifest["collective_network"] == hw.network.name
    assert models.manifest["collective_scope"] == "all"  # across nodes too: not only inside one
    result = evaluate(models, samples)
    assert sorted(result["group"]) == ["1x2", "2x1", "2x2"]
    assert set(result["network"]) == {hw.network.name}
    assert (result["rows"] == 14 * REPEATS).all()


def test_a_gpu_cluster_job_without_cuda_is_one_error_naming_the_hardware(monkeypatch, tmp_path):
    import torch

    from predictor.app.config import load_config
    from sampling.runner import run_sampling
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA: the NCCL path runs instead")
    for k, v in {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_port())}.items():
        monkeypatch.setenv(k, v)
    cfg = load_config(["hardware=h100-sxm", f"output_dir={tmp_path}"])
    with pytest.raises(PrismError, match="needs a CUDA GPU") as err:
        run_sampling(cfg, progress=False)
    assert err.value.field == "hardware" and not any(tmp_path.iterdir())

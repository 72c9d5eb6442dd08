"""Host time: the framework calls of a pass (workload.host), their priors and models, and
the composer's host timeline (max-plus on CUDA, additive on a CPU)."""
import copy
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from predictor.core.errors import PrismError
from predictor.core.ops import Call
from predictor.core.profiles import REPO_ROOT, load_hardware, load_model
from predictor.core.specs import ParallelConfig
from predictor.engine.compose import compose
from predictor.engine.stages import BACKWARD_WORK, FORWARD_WORK, Part, StagePlan, draw_stage_sums
from predictor.latency import artifacts
from predictor.latency.artifacts import ModelSet, foreign_device, models_dir
from predictor.latency.features import host_floor_us
from predictor.latency.lookup import QuantileCache, Source, call_quantiles
from predictor.workload.decompose import decompose
from predictor.workload.host import CALLS, host_calls, host_family


def _launches(calls, pass_="fwd"):
    return {c.shape_dict["launches"]: c.count for c in calls if c.op == "dispatch" and c.pass_ == pass_}


def test_each_framework_s_calls_per_op_and_pass():
    gemm = Call.of("gemm", "fwd", {"m": 8, "n": 8, "k": 8}, count=3)
    assert _launches(host_calls([gemm], "fwd", "megatron", True)) == {CALLS["megatron"]["gemm"][0]: 3}
    bwd = host_calls([Call.of("gemm", "bwd", {"m": 8, "n": 8, "k": 8})], "bwd", "megatron", True)
    assert _launches(bwd, "bwd") == {CALLS["megatron"]["gemm"][1]: 1}
    # a CPU's operator samples hold the op's own calls: only those around it are added
    assert _launches(host_calls([gemm], "fwd", "cpu-eager", False)) == {CALLS["cpu-eager"]["gemm"][0]: 3}
    assert host_calls([Call.of("rope", "fwd", {"tokens": 8, "heads": 2, "head_dim": 4})], "fwd", "cpu-eager",
                      False) == []
    # a recomputed forward inside the backward pass costs a forward's calls
    assert _launches(host_calls([gemm], "bwd", "megatron", True)) == {CALLS["megatron"]["gemm"][0]: 3}


def test_megatron_s_layer_makes_the_counted_calls():
    """Megatron-LM's GPT layer, counted from its code: 76 forward calls, about 40 backward."""
    work = decompose(load_model("gpt3-1.3b"), ParallelConfig(global_batch_size=1, attention="unfused"),
                     load_hardware("a100-sxm4-80gb"), framework="megatron-lm")
    st = work.stages[0]
    layers = st.layers
    per_layer = {p: sum(c.count * c.shape_dict["launches"] for c in (st.forward if p == "fwd" else st.backward)
                        if c.op == "dispatch") / layers for p in ("fwd", "bwd")}
    assert 70 <= per_layer["fwd"] <= 85 and 35 <= per_layer["bwd"] <= 50, per_layer


def test_collectives_cost_host_time_only_where_the_device_runs_ahead():
    ar = Call.of("all_reduce", "step", {"message_bytes": 1 << 20, "group_size": 4}, count=5, role="tp")
    (launch,) = host_calls([ar], "fwd", "megatron", True)
    assert (launch.op, launch.count, launch.shape_dict, launch.role) == ("collective_launch", 5, {"group_size": 4},
                                                                        "host")
    # eager frameworks' TP is DTensor's: a pair of linear layers per TP reduction
    (pair,) = host_calls([ar], "bwd", "cpu-eager", False)
    assert (pair.op, pair.pass_, pair.count, pair.shape_dict) == ("dtensor", "bwd", 5, {"group_size": 4})
    dp = Call.of("all_reduce", "step", {"message_bytes": 1 << 20, "group_size": 4}, role="dp")
    assert host_calls([dp], "bwd", "cpu-eager", False) == []


def test_framework_family_picks_the_table():
    assert host_family("megatron-core", True) == "megatron"
    assert host_family("torchtitan", True) == "eager"
    assert host_family("megatron-core", False) == "cpu-eager"  # a CPU runs PRISM's reference model


def test_decompose_puts_host_calls_in_each_pass():
    hw = load_hardware("a100-sxm4-80gb")
    work = decompose(load_model("gpt3-1.3b"), ParallelConfig(tp=2, global_batch_size=4), hw)
    st = work.stages[0]
    assert {c.op for c in st.forward if c.role == "host"} == {"dispatch", "collective_launch"}
    assert {c.op for c in st.backward if c.role == "host"} == {"dispatch", "collective_launch"}
    cpu = decompose(load_model("tiny"), ParallelConfig(), load_hardware("local-cpu"))
    assert {c.op for c in cpu.stages[0].forward if c.role == "host"} == {"dispatch"}


def test_host_prior_is_the_profile_s_cited_cost():
    hw = load_hardware("h100-sxm")
    call = Call.of("dispatch", "fwd", {"launches": 10})
    q, (evidence,) = call_quantiles([call], None, hw, "bfloat16")
    assert evidence.source is Source.HOST_PRIOR and evidence.prior and evidence.text == "host prior"
    median = q[0][len(q[0]) // 2]
    assert median == pytest.approx(10 * (hw.host.dispatch_us + hw.host.launch_us))


def _host_heavy(asynchronous: bool):
    """A tiny model on one A100: every kernel is short, the framework's calls are not."""
    hw = copy.deepcopy(load_hardware("a100-sxm4-80gb"))
    hw.host.asynchronous = asynchronous
    return decompose(load_model("tiny"), ParallelConfig(global_batch_size=4), hw)


def test_cuda_passes_take_the_longer_timeline_a_cpu_s_add_up():
    models = ModelSet.load(models_dir() / "a100-sxm4-80gb", load_hardware("a100-sxm4-80gb"))
    sums = {}
    for flag in (True, False):
        work = _host_heavy(flag)
        plan = StagePlan.of([work])
        s = draw_stage_sums(plan, models, QuantileCache(models, work.hardware), 1, np.random.default_rng(0))
        sums[flag] = s.nominal[:, 0]
        dist = compose(work, models, draws=200, hold=("temporal", "spatial", "regime", "residual"))
        host = (sums[flag][Part.FORWARD_HOST] + sums[flag][Part.BACKWARD_HOST]) * work.micro_batches
        device = sums[flag][[*FORWARD_WORK, *BACKWARD_WORK]].sum() * work.micro_batches
        assert host > device  # host-bound: the point of the test
        step_us = np.median(dist.draws) * 1e6 - sums[flag][Part.OPTIMIZER]  # the step's serial end
        if flag:
            assert host * (1 - 1e-9) <= step_us < host + device
            assert dist.host_s * 1e6 == pytest.approx(host - device, rel=0.05)
        else:
            assert step_us >= (host + device) * (1 - 1e-9)
            assert dist.host_s * 1e6 == pytest.approx(host, rel=1e-6)


def test_cpu_models_of_another_machine_say_so(monkeypatch):
    hw = load_hardware("local-cpu")
    models = ModelSet.load(models_dir() / "local-cpu", hw)
    device = models.manifest["device"]
    monkeypatch.setattr(artifacts, "this_cpu", lambda: device["name"])
    monkeypatch.setattr(artifacts.socket, "gethostname", lambda: device["hosts"][0])
    assert foreign_device(models) is None
    monkeypatch.setattr(artifacts, "this_cpu", lambda: "AMD EPYC 9654 96-Core Processor")
    note = foreign_device(models)
    assert "AMD EPYC" in note and "prism sample hardware=local-cpu" in note and "prism train" in note
    assert foreign_device(ModelSet.load(models_dir() / "a100-sxm4-80gb", load_hardware("a100-sxm4-80gb"))) is None


def test_models_trained_on_another_host_block_are_stale(tmp_path):
    hw = load_hardware("local-cpu")
    shutil.copytree(models_dir() / "local-cpu", tmp_path / "local-cpu")
    changed = copy.deepcopy(hw)
    changed.host.dispatch_us += 1
    with pytest.raises(PrismError, match="host block"):
        ModelSet.load(tmp_path / "local-cpu", changed)
    manifest = json.loads((tmp_path / "local-cpu" / "manifest.json").read_text())
    assert manifest["host_floor"] and manifest["device"]["name"]


def test_a_figure_only_an_untrained_host_op_reads_leaves_the_models_current(tmp_path):
    """The shipped CPU models have no checkpoint model: its priors may change under them."""
    hw = load_hardware("local-cpu")
    changed = copy.deepcopy(hw)
    changed.host.checkpoint_fwd_us += 1
    assert ModelSet.load(models_dir() / "local-cpu", changed).models
    assert artifacts.host_fingerprint(changed, {"dispatch", "checkpoint"}) != artifacts.host_fingerprint(
        hw, {"dispatch", "checkpoint"})
    for op, field in (("dtensor", "dtensor_bwd_us"), ("collective_launch", "collective_launch_us")):
        changed = copy.deepcopy(hw)
        setattr(changed.host, field, getattr(hw.host, field) + 1)
        assert artifacts.host_fingerprint(changed, {"dispatch"}) == artifacts.host_fingerprint(hw, {"dispatch"})
        assert artifacts.host_fingerprint(changed, {"dispatch", op}) != artifacts.host_fingerprint(hw, {"dispatch", op})


GPU_PROFILES = ["a100-sxm4-80gb", "b200", "gb200-nvl72", "gb300-nvl72", "gh200", "h100-sxm", "h200"]


@pytest.mark.parametrize("hardware", GPU_PROFILES)
def test_gpu_collective_and_dtensor_priors_are_the_h200_host_s_measurement(hardware):
    """The figures the profiles cite: experiments/collective_launch/bench_collective_launch.py on a lent H200."""
    runs = pd.read_csv(REPO_ROOT / "measurements" / "h200-collective-launch.csv")
    issue = runs[runs.what.isin(["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor"])]
    dtensor = runs[runs.what == "dtensor less plain"].groupby("pass_").us.median()
    host = load_hardware(hardware).host
    assert host.collective_launch_us == pytest.approx(issue.us.median(), abs=0.5)
    assert host.dtensor_fwd_us == pytest.approx(dtensor["fwd"], abs=0.5)
    assert host.dtensor_bwd_us == pytest.approx(dtensor["bwd"], abs=0.5)
    # a plain eager call took under a collective's issue: c10d's front-end is the difference
    assert runs[runs.what.str.startswith("eager call")].us.max() < issue.us.min()


def test_a_dtensor_pair_s_prior_is_its_pass_s():
    hw = load_hardware("h100-sxm")
    for pass_, figure in (("fwd", hw.host.dtensor_fwd_us), ("bwd", hw.host.dtensor_bwd_us)):
        assert host_floor_us("dtensor", pass_, {"group_size": np.array([2, 8])}, hw).tolist() == [figure, figure]
    assert hw.host.dtensor_bwd_us > hw.host.dtensor_fwd_us


@pytest.mark.parametrize("hardware", ["local-cpu", "a100-sxm4-80gb"])
def test_full_recompute_pays_each_block_s_checkpoint_beside_its_recomputed_calls(hardware):
    hw = load_hardware(hardware)
    model = load_model("tiny")
    plain = decompose(model, ParallelConfig(global_batch_size=4), hw).stages[0]
    full = decompose(model, ParallelConfig(global_batch_size=4, recompute="full"), hw).stages[0]
    assert not [c for c in plain.forward + plain.backward if c.op == "checkpoint"]
    for pass_, calls in (("fwd", full.forward), ("bwd", full.backward)):
        (ckpt,) = [c for c in calls if c.op == "checkpoint"]
        assert ckpt.pass_ == pass_ and ckpt.shape_dict == {"blocks": model.num_layers} and ckpt.role == "host"
        q, (evidence,) = call_quantiles([ckpt], None, hw, hw.train_dtype)
        each = hw.host.checkpoint_bwd_us if pass_ == "bwd" else hw.host.checkpoint_fwd_us
        assert evidence.source is Source.HOST_PRIOR
        assert q[0][len(q[0]) // 2] == pytest.approx(model.num_layers * each)


@pytest.mark.parametrize("key", ["dispatch_us", "checkpoint_fwd_us", "checkpoint_bwd_us"])
def test_a_negative_host_figure_is_refused_naming_it(key):
    from predictor.app.config import load_config
    from predictor.core.profiles import section
    from predictor.core.specs import HardwareConfig
    with pytest.raises(PrismError, match=f"hardware.host.{key}=-5.0: must be a non-negative"):
        section(load_config(["hardware=h100-sxm", f"hardware.host.{key}=-5"]), "hardware", HardwareConfig)


def test_sample_if_missing_samples_only_a_cpu_that_lacks_its_own_models(monkeypatch):
    from predictor.app import cli
    with pytest.raises(PrismError, match="GPU profile") as info:
        cli._sample_this_machine(load_hardware("h100-sxm"), None)
    assert info.value.field == "sample_if_missing"
    ran = []
    monkeypatch.setattr("subprocess.run", lambda *a, **k: ran.append(a) or type("Done", (), {"returncode": 0}))
    hw = load_hardware("local-cpu")
    device = ModelSet.load(models_dir() / "local-cpu", hw).manifest["device"]
    monkeypatch.setattr(artifacts, "this_cpu", lambda: device["name"])
    monkeypatch.setattr(artifacts.socket, "gethostname", lambda: device["hosts"][0])
    assert cli._sample_this_machine(hw, None) is None and not ran  # the shipped models are this machine's
    monkeypatch.setattr(artifacts, "this_cpu", lambda: "another CPU")
    assert cli._sample_this_machine(hw, None) == str(artifacts.TRAINED_MODELS)
    assert [a[0][3] for a in ran] == ["sample", "train"]


def test_dp_hooks_grow_with_parameter_tensors_and_the_optimizer_adds_no_host_calls():
    """DP's hooks are a framework call per tensor in the backward; around the optimizer no
    call is counted per tensor (multi-tensor kernels; Megatron's loops launch nothing)."""
    from predictor.workload.host import hook_calls
    (hooks,) = hook_calls(100, 8)
    assert (hooks.op, hooks.pass_, hooks.shape_dict["launches"], hooks.role) == ("dispatch", "bwd", 100, "host")
    assert hook_calls(100, 1) == []
    stage = decompose(load_model("tiny"), ParallelConfig(), load_hardware("h100-sxm")).stages[0]
    assert [c.op for c in stage.step] == ["optimizer_step"]


def test_a_flag_that_is_not_true_or_false_is_refused(capsys):
    from predictor.app import cli
    assert cli.main(["predict", "model=tiny", "hardware=local-cpu", "sample_if_missing=maybe"]) == 2
    assert "sample_if_missing=maybe: give true or false" in capsys.readouterr().err


def test_equal_host_ops_of_different_calls_are_one_call():
    """A layernorm and a gemm with the same number of framework calls add to one dispatch call."""
    assert CALLS["megatron"]["layernorm"][0] == CALLS["megatron"]["gemm"][0]
    calls = [Call.of("layernorm", "fwd", {"tokens": 8, "hidden": 8}, count=2),
             Call.of("gemm", "fwd", {"m": 8, "n": 8, "k": 8}, count=3)]
    assert _launches(host_calls(calls, "fwd", "megatron", True)) == {CALLS["megatron"]["gemm"][0]: 5}


def test_a_pass_is_one_dispatch_call_of_all_its_framework_calls():
    """One backward() enters the autograd engine once, and a CPU's framework time is
    sampled per pass (sampling.framework): on every host each pass's dispatch calls (the
    ops' and DP's hooks) are one call with all their launches, a recomputed forward's one
    more in the backward; apart, each op's call would pay the engine's entry again."""
    model, par = load_model("tiny"), ParallelConfig(dp=2, global_batch_size=8)
    for hardware, family, asynchronous in (("local-cpu", "cpu-eager", False), ("h100-sxm", "megatron", True)):
        stage = decompose(model, par, load_hardware(hardware)).stages[0]
        tensors = sum(c.shape_dict["tensors"] for c in stage.step if c.op == "optimizer_step")
        for calls, pass_, hooks in ((stage.forward, "fwd", 0), (stage.backward, "bwd", tensors)):
            (one,) = [c for c in calls if c.op == "dispatch"]
            per_call = host_calls([c for c in calls if c.role != "host"], pass_, family, asynchronous)
            assert one.count == 1 and one.pass_ == pass_ and one.shape_dict["launches"] == sum(
                c.count * c.shape_dict["launches"] for c in per_call) + hooks
        recomputed = decompose(model, ParallelConfig(recompute="full"), load_hardware(hardware)).stages[0].backward
        assert sorted(c.pass_ for c in recomputed if c.op == "dispatch") == ["bwd", "fwd"]


def test_a_job_resting_on_no_trained_model_is_told_as_the_spec_prior(tmp_path):
    """A set trained on one collective alone answers nothing a one-rank job asks: its report and
    its predictive interval are the spec-only prior's, not "measured samples"."""
    from predictor.analyses.predict import predict
    from predictor.app.config import load_config
    from predictor.core.profiles import section
    from predictor.core.specs import RegressorConfig
    from predictor.data.store import read_samples
    from predictor.latency.artifacts import TIERS, train
    hw = load_hardware("local-cpu")
    rows = read_samples(REPO_ROOT / "samples" / "local-cpu")
    train(rows[rows.op == "all_reduce"], hw, section(load_config([]), "regressor", RegressorConfig),
          n_jobs=1).save(tmp_path / hw.name)
    alone = predict(load_model("tiny"), hw, ParallelConfig(), 1, models_dir=tmp_path, draws=2000)
    assert alone.tier == TIERS[2]
    assert alone.breakdown_s["exposed_communication"] == 0.0  # one rank: none, not a sum's round-off
    shipped = predict(load_model("tiny"), hw, ParallelConfig(), 1, draws=2000)
    assert shipped.tier == TIERS[0]


def test_cuda_graphs_leave_the_host_one_launch_a_layer():
    """Layers captured in CUDA graphs are replayed by one launch a layer and pass: a
    host-bound step (a small model on H100s) loses its host time, the device's stays; a CPU
    has no CUDA graphs and says so."""
    hw, model = load_hardware("h100-sxm"), load_model("small")
    par = ParallelConfig(tp=2, dp=4, global_batch_size=16)
    eager, graphed = (decompose(model, ParallelConfig(**{**vars(par), "cuda_graphs": g}), hw, 8) for g in (False, True))
    host = [c for c in graphed.stages[0].forward if c.role == "host"]
    assert [(c.op, c.shape_dict["launches"]) for c in host] == [("dispatch", model.num_layers)]
    assert [c for c in graphed.stages[0].forward if c.role != "host"] == \
        [c for c in eager.stages[0].forward if c.role != "host"]
    models = artifacts.trained_models(hw)
    slow, fast = (compose(w, models, draws=200) for w in (eager, graphed))
    assert slow.host_s > 0 and fast.host_s == 0 and np.median(fast.draws) < np.median(slow.draws)
    with pytest.raises(PrismError) as err:
        decompose(load_model("tiny"), ParallelConfig(cuda_graphs=True), load_hardware("local-cpu"))
    assert err.value.field == "parallel.cuda_graphs"

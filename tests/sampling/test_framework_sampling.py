"""The framework time sampled in situ (sampling.framework): real profiled steps of the
reference model on this CPU, the host-clock passes a GPU host takes (run here on the CPU,
where they hold the device's time too), and how training takes them over from the chain."""
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from predictor.core.profiles import load_hardware  # noqa: E402
from predictor.latency.adjustments.backward_entry import in_situ_host  # noqa: E402
from predictor.latency.origins import FRAMEWORK  # noqa: E402
from sampling.framework import LAYERS, host_clock_rows, profiled_rows  # noqa: E402

pytestmark = pytest.mark.slow  # real profiled steps of the reference model: 3 to 30 s a test


@pytest.fixture(scope="module")
def rows():
    return pd.DataFrame(profiled_rows(steps=3))


def test_each_profiled_step_gives_a_dispatch_row_per_pass(rows):
    assert set(rows.op) == {"dispatch"} and (rows.origin == FRAMEWORK).all()
    assert (rows.latency_us > 0).all() and (rows.launches > 0).all()
    assert rows.groupby("pass").size().to_dict() == {"bwd": 3 * len(LAYERS), "fwd": 3 * len(LAYERS)}


def test_deeper_models_count_more_calls_and_take_longer(rows):
    for _, g in rows.groupby("pass"):
        fastest = g.groupby("launches").latency_us.min()
        assert len(fastest) == len(LAYERS)
        # eight layers make eight times a layer's calls: far more time than one layer's (3.2-5.3
        # times over three runs). The fastest of the steps, not their median: a stall
        # of this shared slice only adds time, and one made a layer's median 5.5 ms against
        # eight layers' 5.1 while the whole suite and a probe ran on its two cores
        assert fastest.iloc[-1] > 1.5 * fastest.iloc[0]


def test_in_situ_rows_replace_the_chain_in_the_dispatch_model(rows):
    chain = pd.DataFrame({"op": ["dispatch", "dispatch", "gemm"], "pass": ["fwd", "bwd", "fwd"],
                          "launches": [1.0, 256.0, None], "latency_us": [5.0, 900.0, 40.0],
                          "origin": ["sampled"] * 3})
    assert in_situ_host(chain) is chain  # no in-situ rows: the chain is the dispatch model
    both = pd.concat([chain, rows], ignore_index=True)
    kept = in_situ_host(both)
    assert (kept[kept.op == "dispatch"].origin == FRAMEWORK).all()
    assert len(kept) == len(rows) + 1  # the gemm stays


def test_a_gpu_host_s_passes_are_timed_with_the_calls_the_eager_family_counts():
    """On a GPU the host's clock around each pass is the framework time (the device is never
    behind at these sizes); the rows carry the launches the composer counts for the
    reference (eager family on an asynchronous profile), more for each deeper model. Run
    here on the CPU under bf16 autocast, as the reference runs on CUDA."""
    import torch

    rows = pd.DataFrame(host_clock_rows(steps=3, hw=load_hardware("h200"), device=torch.device("cpu"),
                                        dtype="bfloat16", warmup=1))
    assert set(rows.op) == {"dispatch"} and (rows.origin == FRAMEWORK).all() and (rows.latency_us > 0).all()
    assert rows.groupby("pass").size().to_dict() == {"bwd": 3 * len(LAYERS), "fwd": 3 * len(LAYERS)}
    for _, g in rows.groupby("pass"):
        # the fastest step, not the median: a stall of this shared slice only adds time, and
        # one made a layer's median of two steps 14.5 ms against eight layers' 7.7 in CI
        fastest = g.groupby("launches").latency_us.min()
        assert len(fastest) == len(LAYERS) and fastest.index[-1] > 4 * fastest.index[0]
        assert fastest.iloc[-1] > fastest.iloc[0]


def test_checkpoint_rows_are_the_recomputed_passes_less_the_plain_medians(monkeypatch):
    """The arithmetic of the rows, on a clock that is known: a row is a recompute step's
    forward less the plain median forward, and its backward less the plain median backward
    and forward; a step no slower than the plain one gives no row."""
    import sampling.framework as framework
    clock = {}

    def passes(net, optimizer, x, y, device, autocast):
        blocks, full = len(net.blocks), net.recompute == "full"
        i = clock[(blocks, full)] = clock.get((blocks, full), -1) + 1
        fwd = 100.0 * blocks + (30.0 * blocks if full else 0.0)
        bwd = 200.0 * blocks + (fwd + 10.0 * blocks if full else 0.0)
        if full and blocks == 1 and i == framework_steps + 1:
            return fwd - 50.0, bwd  # quicker than the plain forward: no measure of the wrapper
        return fwd, bwd

    framework_steps = 4
    monkeypatch.setattr(framework, "_host_passes", passes)
    rows = pd.DataFrame(framework.checkpoint_rows(steps=framework_steps, device=torch.device("cpu"),
                                                  dtype="float32", warmup=2))
    fwd = rows[rows["pass"] == "fwd"].groupby("blocks").latency_us
    bwd = rows[rows["pass"] == "bwd"].groupby("blocks").latency_us
    assert fwd.size().to_dict() == {1: 3, 2: 4, 4: 4, 8: 4} and (bwd.size() == 4).all()
    assert fwd.max().to_dict() == {b: 30.0 * b for b in LAYERS}
    # less the plain backward and the plain forward, whose calls the composer counts for the
    # recomputed one: the wrapper's time in the recomputed forward (30) and in the backward (10)
    assert bwd.max().to_dict() == {b: 40.0 * b for b in LAYERS}


def test_checkpoint_rows_measured_here():
    """The same rows timed on this CPU: labelled, positive, of the depths trained. How much
    each depth costs is not asserted: a difference of host clocks a few hundred microseconds
    apart is at the mercy of a shared VM (one CI run read 2.0 ms for one block, 0.7 ms for
    two and 1.0 ms for eight)."""
    from sampling.framework import checkpoint_rows
    rows = pd.DataFrame(checkpoint_rows(steps=3, device=torch.device("cpu"), dtype="float32"))
    assert set(rows.op) == {"checkpoint"} and (rows.origin == FRAMEWORK).all() and (rows.latency_us > 0).all()
    assert set(rows["pass"]) <= {"fwd", "bwd"} and set(rows.blocks) <= set(LAYERS) and len(rows) > 0

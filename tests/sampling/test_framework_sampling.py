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

    rows = pd.DataFrame(host_clock_rows(steps=2, hw=load_hardware("h200"), device=torch.device("cpu"),
                                        dtype="bfloat16", warmup=1))
    assert set(rows.op) == {"dispatch"} and (rows.origin == FRAMEWORK).all() and (rows.latency_us > 0).all()
    assert rows.groupby("pass").size().to_dict() == {"bwd": 2 * len(LAYERS), "fwd": 2 * len(LAYERS)}
    for _, g in rows.groupby("pass"):
        launches = g.groupby("launches").latency_us.median()
        assert len(launches) == len(LAYERS) and launches.index[-1] > 4 * launches.index[0]
        assert launches.iloc[-1] > launches.iloc[0]


def test_checkpointing_a_block_costs_host_time_beyond_its_recomputed_calls():
    """Each depth's steps with and without recompute: the wrapper's time, per pass, grows
    with the blocks it wraps."""
    from sampling.framework import checkpoint_rows
    rows = pd.DataFrame(checkpoint_rows(steps=5, device=torch.device("cpu"), dtype="float32"))
    assert set(rows.op) == {"checkpoint"} and (rows.origin == FRAMEWORK).all() and (rows.latency_us > 0).all()
    for _, g in rows.groupby("pass"):
        medians = g.groupby("blocks").latency_us.median()
        # against the cheapest depth, not the first: on a shared VM one depth's 5 steps can all run slow
        # (1 block 4.8 ms, 2 blocks 3.6 ms, 8 blocks 7.2 ms in one CI run)
        assert medians.index.max() == max(LAYERS) and medians.iloc[-1] > 1.5 * medians.min()

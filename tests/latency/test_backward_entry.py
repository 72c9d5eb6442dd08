"""The autograd entry taken off backward samples timed on the host (latency.backward_entry),
on this machine's shipped samples."""
import numpy as np
import pytest

from predictor.core.ops import FORWARD_WORK_IN_BWD
from predictor.core.profiles import REPO_ROOT, load_hardware
from predictor.data.store import read_samples
from predictor.latency.adjustments.backward_entry import FLOOR, entry_us, without_entry
from predictor.latency.artifacts import ModelSet, models_dir


@pytest.fixture(scope="module")
def samples():
    return read_samples(REPO_ROOT / "samples" / "local-cpu")


def test_the_entry_is_the_intercept_of_the_dispatch_backward_samples(samples):
    (run, entry), = entry_us(samples).items()
    dispatch = samples[(samples.op == "dispatch") & (samples["pass"] == "bwd")]
    medians = dispatch.groupby("launches").latency_us.median()
    # below the shortest chain's time, and most of it: one node costs a few us
    assert 0.5 * medians.iloc[0] < entry <= medians.iloc[0]


def test_only_replayed_backward_samples_lose_it(samples):
    out, entries = without_entry(samples, asynchronous=False)
    entry = next(iter(entries.values()))
    changed = out.latency_us.to_numpy() != samples.latency_us.to_numpy()
    assert (samples[changed]["pass"] == "bwd").all()
    assert not samples[changed].op.isin(["dispatch", "dtensor", "optimizer_step", *FORWARD_WORK_IN_BWD]).any()
    before, after = samples.latency_us[changed].to_numpy(), out.latency_us[changed].to_numpy()
    assert np.allclose(after, np.maximum(before - entry, FLOOR * before))
    gemm = (samples.op == "gemm") & (samples["pass"] == "bwd")
    assert changed[gemm.to_numpy()].all()


def test_a_gpu_s_samples_are_untouched(samples):
    out, entries = without_entry(samples, asynchronous=True)
    assert out is samples and entries == {}


def test_the_shipped_models_record_it(samples):
    models = ModelSet.load(models_dir() / "local-cpu", load_hardware("local-cpu"))
    assert models.manifest["backward_entry_us"] == pytest.approx(entry_us(samples))

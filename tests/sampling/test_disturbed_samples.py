"""prism sample says at its end where repeats it stored stalled (issue 55)."""
import pytest

pytest.importorskip("torch")

from predictor.data.store import read_samples  # noqa: E402
from predictor.latency.artifacts import shape_groups  # noqa: E402
from sampling.runner import stalls_note  # noqa: E402


def test_sample_says_so_when_a_repeat_stalled():
    df = read_samples("samples/local-cpu")
    gemm = df[df.op == "gemm"].copy()
    ids = shape_groups("gemm", gemm)
    quiet = gemm[ids == ids[0]].copy()
    assert stalls_note(quiet) is None
    quiet.loc[quiet.index[0], "latency_us"] *= 116  # the stall the issue saw
    note = stalls_note(quiet)
    assert note.startswith("WARNING: 1 of ") and "shapes stalled" in note and "gemm/" in note and "idle machine" in note

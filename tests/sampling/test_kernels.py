"""Every compute op of the vocabulary runs forward and backward at a small shape."""
import pytest

torch = pytest.importorskip("torch")

from predictor.core.errors import PrismError  # noqa: E402
from predictor.core.ops import COMPUTE_OPS, OPS  # noqa: E402
from predictor.core.profiles import load_hardware, load_model
from predictor.core.specs import ParallelConfig
from predictor.workload.decompose import decompose  # noqa: E402
from predictor.workload.layers import parameter_count  # noqa: E402
from sampling import kernels  # noqa: E402
from sampling.model import Transformer  # noqa: E402
from sampling.timers import CpuTimer  # noqa: E402

SMALL = {
    "gemm": {"m": 32, "n": 48, "k": 16},
    "attention": {"batch": 2, "heads": 4, "kv_heads": 2, "seq_q": 32, "seq_kv": 32, "head_dim": 16,
                  "causal": True},
    "bmm": {"batch": 3, "m": 32, "n": 48, "k": 16},
    "softmax": {"batch": 2, "heads": 2, "seq_q": 16, "seq_kv": 16, "causal": True},
    "masked_fill": {"batch": 2, "heads": 2, "seq_q": 16, "seq_kv": 16},
    "rope": {"tokens": 32, "heads": 4, "head_dim": 16},
    "embedding": {"tokens": 32, "hidden": 16, "vocab": 100},
    "cross_entropy": {"tokens": 32, "vocab": 100},
    "vocab_parallel_cross_entropy": {"tokens": 32, "vocab": 100},
    "optimizer_step": {"params": 5000, "tensors": 3, "optimizer": "adamw"},
    "master_weights": {"params": 5000},
    "grad_accumulate": {"params": 5000},
    "dispatch": {"launches": 6},
    "router": {"tokens": 32, "hidden": 16, "experts": 8, "top_k": 2},
    "permute": {"tokens": 32, "hidden": 16, "top_k": 2},
    "unpermute": {"tokens": 32, "hidden": 16, "top_k": 2},
    "grouped_gemm": {"batch": 4, "m": 8, "n": 48, "k": 16},
}


@pytest.mark.parametrize("op, pass_", [(op, p) for op in (*COMPUTE_OPS, "dispatch") for p in OPS[op].passes])
def test_every_op_and_pass_times(op, pass_):
    shape = SMALL.get(op, {"tokens": 32, "hidden": 16})
    fn = kernels.build(op, pass_, shape, "float32", torch.device("cpu"))
    times = CpuTimer(threads=1).time(fn, repeats=3, warmup=1)
    assert len(times) == 3 and all(t > 0 for t in times)


def test_dispatch_makes_its_framework_calls_and_collective_launch_is_refused():
    fn = kernels.build("dispatch", "fwd", {"launches": 5}, "float32", torch.device("cpu"))
    y = fn()
    assert y.shape == (4, 4) and y.grad_fn is not None  # recorded by autograd, as in training
    with pytest.raises(PrismError, match="collective_launch"):
        kernels.build("collective_launch", "step", {"group_size": 2}, "float32", torch.device("cpu"))


def test_megatrons_loss_is_cross_entropy_with_its_gradient():
    """The sampled Megatron loss computes what ``F.cross_entropy`` does, forward and backward,
    in bf16 logits as Megatron gets them, and its backward can be replayed."""
    logits = torch.randn(64, 1000, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, 1000, (64,))
    grad_loss = torch.randn(64)
    ours = kernels._VocabParallelCrossEntropy.apply(logits, target)
    mine = [torch.autograd.grad(ours, logits, grad_loss, retain_graph=True)[0] for _ in range(2)]
    theirs = torch.nn.functional.cross_entropy(logits.float(), target, reduction="none")
    expected = torch.autograd.grad(theirs, logits, grad_loss)[0]
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    for grad in mine:
        assert grad.dtype == torch.bfloat16
        torch.testing.assert_close(grad, expected)


def test_backward_replays_the_graph_of_one_call():
    fn = kernels.build("gemm", "bwd", SMALL["gemm"], "float32", torch.device("cpu"))
    dx, dw = fn()
    assert dx.shape == (32, 16) and dw.shape == (16, 48)
    assert torch.equal(fn()[0], dx)  # same graph, same gradient each repeat


@pytest.mark.parametrize("name", ["tiny", "tiny-gpt"])
def test_reference_model_matches_the_workload_and_learns(name):
    model = load_model(name)
    torch.manual_seed(0)
    net = Transformer(model)
    assert sum(p.numel() for p in net.parameters()) == parameter_count(model)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3)
    ids = torch.randint(0, model.vocab_size, (2, model.seq_length + 1))
    losses = []
    for _ in range(5):
        logits = net(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    # The composer's calls name what the model runs.
    [stage] = decompose(model, ParallelConfig(), load_hardware("local-cpu")).stages
    assert {c.op for c in stage.forward} >= {"gemm", "attention", model.norm}


def test_cpu_timer_flushes_l2_before_each_repeat():
    fn = kernels.build("gemm", "fwd", SMALL["gemm"], "float32", torch.device("cpu"))
    timer = CpuTimer(threads=1, l2_bytes=1 << 16)
    assert timer._flush.numel() == 2 << 16
    assert len(timer.time(fn, repeats=2, warmup=0)) == 2
    assert CpuTimer(threads=1)._flush is None  # without an L2 size, no flush


def test_the_cuda_timer_puts_the_device_its_first_lead_behind_before_the_first_repeat(monkeypatch):
    """The stream a CUDA timing issues, recorded without a GPU: the device is drained, then
    given FIRST_LEAD_S of spin before the first repeat, HOST_LEAD_S before each (a host hiccup
    of up to 3 ms read as device time in 0.47% of an H200's repeats with the short lead alone)."""
    from sampling import timers
    issued = []

    class Event:
        def __init__(self, enable_timing):
            pass

        def record(self):
            issued.append("event")

        def elapsed_time(self, other):
            return 1e-3

    monkeypatch.setattr(timers.torch.cuda, "Event", Event)
    monkeypatch.setattr(timers.torch.cuda, "synchronize", lambda device=None: issued.append("sync"))
    monkeypatch.setattr(timers.torch.cuda, "_sleep", lambda cycles: issued.append(cycles / timers.SPIN_HZ))
    timer = timers.CudaTimer.__new__(timers.CudaTimer)
    timer.device, timer.first_lead_s = None, timers.FIRST_LEAD_S
    timer._flush = torch.empty(8, dtype=torch.uint8)
    assert timer.time(lambda: issued.append("op"), repeats=2, warmup=0) == [1.0, 1.0]
    first, each = timers.FIRST_LEAD_S, timers.HOST_LEAD_S
    assert issued == ["sync", first, each, "event", "op", "event", each, "event", "op", "event", "sync"]
    assert timers.FIRST_LEAD_S >= 4e-3  # over the host hiccups seen (up to 3.1 ms)

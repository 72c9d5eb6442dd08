"""`prism import-trace`: profiler traces of the reference workload become sample rows.

The traces are recorded here, by `prism measure measure.trace_dir=...` on the tiny model
with two gloo ranks (one traced step each), so every test reads what PyTorch really writes.
"""
import gzip
import json
import subprocess
import sys

import pandas as pd
import pytest

from predictor.app.config import load_config
from predictor.core.errors import PrismError
from predictor.core.layout import resolve_layout
from predictor.core.profiles import REPO_ROOT, load_model, section
from predictor.core.specs import HardwareConfig, ParallelConfig, RegressorConfig
from predictor.data import store
from predictor.data.importers.chrome_json import TraceStream
from predictor.data.importers.trace import FLOOR_US, import_trace
from predictor.engine.compose import compose
from predictor.latency.artifacts import train
from predictor.workload.decompose import decompose
from predictor.workload.host import CALLS, HOOK_CALLS_PER_TENSOR
from predictor.workload.layers import parameter_tensors

MODEL = load_model("tiny")  # 2 layers, llama-style: rope, swiglu, rmsnorm
H100_TRACE = REPO_ROOT / "measurements" / "h100-gpt3-1.3b-step-trace.json.gz"  # one GPU step, 181 rows


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    pytest.importorskip("torch")
    from sampling.measure import measure
    folder = tmp_path_factory.mktemp("traces")
    measure(load_config(["model=tiny", "parallel.dp=2", "measure.steps=1", "measure.warmup=1",
                         f"measure.trace_dir={folder}", "measure.trace_steps=1",
                         f"out={folder / 'measured.parquet'}"]), progress=False)
    return sorted(folder.glob("rank*.json"))


@pytest.fixture(scope="module")
def imported(traces, tmp_path_factory):
    out = tmp_path_factory.mktemp("store")
    report = import_trace(traces, out, hardware="local-cpu")
    return report, pd.read_parquet(report.run_file), out


@pytest.mark.slow
def test_reference_traces_map_every_call_of_a_step(traces, imported):
    report, rows, _ = imported
    assert [t.name for t in traces] == ["rank0.step0.json", "rank1.step0.json"]
    assert report.kind == "cpu" and report.steps == 2 and set(rows.origin) == {"trace"}
    calls = rows.groupby(["op", "pass"]).size().to_dict()
    per_step = 2 * 4  # two ranks x four micro-batches
    layers = MODEL.num_layers
    assert calls[("gemm", "fwd")] == calls[("gemm", "bwd")] == per_step * (4 * layers + 1)  # qkv, out, up, down; head
    assert calls[("attention", "fwd")] == calls[("attention", "bwd")] == per_step * layers
    assert calls[("rope", "fwd")] == per_step * 2 * layers  # q and k, one prism::rope region each
    assert calls[("swiglu", "fwd")] == per_step * layers
    assert calls[("rmsnorm", "fwd")] == per_step * (2 * layers + 1)
    assert calls[("residual_add", "fwd")] == per_step * 2 * layers
    assert calls[("embedding", "bwd")] == calls[("cross_entropy", "fwd")] == per_step
    assert calls[("optimizer_step", "step")] == 2
    assert (rows.latency_us > 0).all()


def test_traced_steps_are_spread_between_the_timed_ones():
    pytest.importorskip("torch")
    from sampling.tracing import trace_points
    assert trace_points(5, 20, 3) == {10: 1, 15: 1, 20: 1}  # a quarter, half and three quarters in
    assert trace_points(1, 1, 1) == {1: 1}  # before the one timed step, after the warm-up
    crowded = trace_points(2, 2, 5)  # more traces than timed steps: several cycles at one point
    assert sum(crowded.values()) == 5 and set(crowded) <= {2, 3}


@pytest.mark.slow
def test_shapes_are_the_models(imported):
    _, rows, _ = imported
    h, t = MODEL.hidden_size, MODEL.seq_length  # micro-batch 1
    gemm = {tuple(r) for r in rows[rows.op == "gemm"][["m", "n", "k"]].astype(int).to_numpy()}
    qkv = (MODEL.num_heads + 2 * MODEL.num_kv_heads) * MODEL.head_dim
    assert gemm == {(t, qkv, h), (t, h, MODEL.num_heads * MODEL.head_dim), (t, 2 * MODEL.ffn_hidden_size, h),
                    (t, h, MODEL.ffn_hidden_size), (t, MODEL.vocab_size, h)}
    att = rows[rows.op == "attention"].iloc[0]
    assert (att.batch, att.heads, att.kv_heads, att.seq_q, att.head_dim, bool(att.causal)) == \
        (1, MODEL.num_heads, MODEL.num_kv_heads, t, MODEL.head_dim, True)
    assert set(rows[rows.op == "rope"].heads) == {MODEL.num_heads, MODEL.num_kv_heads}
    assert set(rows[rows.op == "swiglu"].hidden) == {MODEL.ffn_hidden_size}
    opt = rows[rows.op == "optimizer_step"].iloc[0]
    assert opt.tensors == parameter_tensors(MODEL)
    assert set(rows.dtype) == {"float32"}
    # the DDP gradient all-reduce: gloo's buffer, the job's one 2-rank group
    ar = rows[rows.op == "all_reduce"]
    assert len(ar) and set(ar.group_size) == {2} and (ar.message_bytes % 4 == 0).all()
    assert set(ar.ranks_per_node) == {2} and set(ar.nodes) == {1}  # both ranks on this host


@pytest.mark.slow
def test_unknown_ops_are_counted_and_the_attributed_share_is_the_stored_one(imported):
    report, rows, _ = imported
    names = {u["name"] for u in report.unknown_ops}
    assert "torch::autograd::AccumulateGrad" in names  # real work outside the vocabulary: reported
    assert all(u["calls"] > 0 and u["total_ms"] >= 0 for u in report.unknown_ops)
    # How much of a step the ops explain is a timing (about 70% here when idle, under 40% on a
    # busy 2-core CI box): benchmarks/bench_trace.py prints it. The test checks it is the
    # stored steps' own ratio, which is what `prism calibrate` reads back.
    meta = store.read_run_metadata(report.run_file)
    assert len(meta["step_us"]) == report.steps == 2
    assert report.attributed_share == pytest.approx(sum(meta["attributed_us"]) / sum(meta["step_us"]))
    assert 0 < report.attributed_share <= 1.0
    assert report.op_overhead_us > 0


@pytest.mark.slow
def test_the_recorded_profiler_cost_comes_off_every_cpu_timing(traces, imported, tmp_path):
    report, rows, _ = imported
    # measured by the recorder and stored in each trace; a timing, so only bounded here: on a busy
    # CI machine the traced runs were once no slower than the untraced ones and it measured 0
    assert report.profiler_cost_us is not None and 0 <= report.profiler_cost_us < 20
    raw = import_trace(traces, tmp_path, hardware="local-cpu", profiler_cost_us=0.0)
    raw_rows = pd.read_parquet(raw.run_file)
    key = ["op", "pass"]
    assert raw_rows.groupby(key).size().equals(rows.groupby(key).size())
    # a call with events recorded inside it is faster once their cost is taken off
    assert (rows.groupby(key).latency_us.sum() <= raw_rows.groupby(key).latency_us.sum()).all()
    assert rows[rows.op == "gemm"].latency_us.sum() < raw_rows[raw_rows.op == "gemm"].latency_us.sum()
    assert raw.op_overhead_us > report.op_overhead_us


@pytest.mark.slow
def test_a_call_under_the_profilers_mean_cost_is_kept_at_the_floor(traces, imported, tmp_path):
    """On a busy CPU a short call can measure less than its events' mean recording cost; it
    was dropped, with its framework calls from the dispatch rows' count."""
    _, rows, _ = imported
    busy = import_trace(traces, tmp_path, hardware="local-cpu", profiler_cost_us=1e4)
    busy_rows = pd.read_parquet(busy.run_file)
    key = ["op", "pass"]
    compute = busy_rows[busy_rows.op != "dispatch"]
    assert compute.groupby(key).size().equals(rows[rows.op != "dispatch"].groupby(key).size())
    assert 0 < sum(busy.floored.values()) <= (compute.latency_us <= FLOOR_US).sum()
    assert "(kept)" in busy.table()


@pytest.mark.slow
def test_the_steps_framework_time_becomes_dispatch_rows_the_composer_reads_back(imported):
    report, rows, samples = imported
    dispatch = rows[rows.op == "dispatch"]
    assert sorted(dispatch["pass"]) == ["bwd", "bwd", "fwd", "fwd"]  # one per pass of each rank's step
    # launches: the calls the composer counts around each traced compute call on a CPU, and
    # DDP's hook per parameter tensor in each of the four micro-batches' backwards
    table = CALLS["cpu-eager"]
    ops = rows[rows.op != "dispatch"]
    per_rank = {p: sum(table.get(op, (0, 0))[p == "bwd"] for op in ops[ops["pass"] == p].op) / 2
                for p in ("fwd", "bwd")}
    per_rank["bwd"] += HOOK_CALLS_PER_TENSOR * parameter_tensors(MODEL) * 4
    for p, n in per_rank.items():
        assert set(dispatch[dispatch["pass"] == p].launches) == {n}
    meta = store.read_run_metadata(report.run_file)  # within the time no recognised call explains
    assert 0 < dispatch.latency_us.sum() <= sum(meta["step_us"]) - sum(meta["attributed_us"])

    # models trained on the trace alone compose that time back for the layout traced
    cfg = load_config(["model=tiny", "parallel.dp=2", "hardware=local-cpu"])
    hw = section(cfg, "hardware", HardwareConfig)
    models = train(store.read_samples(samples), hw, section(cfg, "regressor", RegressorConfig))
    work = decompose(MODEL, resolve_layout(section(cfg, "parallel", ParallelConfig), None), hw)
    composed_us = compose(work, models, draws=200).host_s * 1e6
    traced_us = dispatch.groupby("pass").latency_us.mean().sum()
    assert composed_us == pytest.approx(traced_us, rel=0.25)


def test_framework_time_is_the_gaps_before_each_pass_less_the_profilers_cost(tmp_path):
    """A hand-built CPU step, exactly: 100 us before the linear, 100 us before the layer
    norm holding one unrecognised event (its recording cost taken off), and the time after
    the last op (the optimizer's side of the step) not charged."""
    def op(name, ts, dur, **args):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
        op("aten::linear", 100, 100, **{"Input Dims": [[8, 16], [32, 16], [32]], "Input type": ["float"] * 3}),
        op("aten::view", 250, 10),
        op("aten::layer_norm", 300, 50, **{"Input Dims": [[8, 32]], "Input type": ["float"]}),
    ]
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    report = import_trace([path], tmp_path / "out", hardware="local-cpu", profiler_cost_us=2.0)
    rows = pd.read_parquet(report.run_file)
    dispatch = rows[rows.op == "dispatch"].iloc[0]
    assert len(rows[rows.op == "dispatch"]) == 1 and dispatch["pass"] == "fwd"  # no backward in this step
    assert dispatch.latency_us == pytest.approx(100 + (100 - 2.0))
    assert dispatch.launches == CALLS["cpu-eager"]["gemm"][0] + CALLS["cpu-eager"]["layernorm"][0]


def test_a_call_of_a_negative_size_is_skipped_and_counted(tmp_path):
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
               "args": {"Input Dims": [[8, 16], [-32, 16], [32]], "Input type": ["float"] * 3}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
               "args": {"Input Dims": [[8, 16], [32, 16], [32]], "Input type": ["float"] * 3}}]
    path = tmp_path / "neg.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    report = import_trace([path], tmp_path / "out", hardware="local-cpu", profiler_cost_us=0.0)
    rows = pd.read_parquet(report.run_file)
    assert list(rows.n) == [32] and report.skipped == {"gemm calls with a non-positive size in their shape": 1}


@pytest.mark.slow
def test_cli_reads_files_then_settings(traces, tmp_path):
    out = subprocess.run([sys.executable, "-m", "predictor.app.cli", "import-trace", *map(str, traces),
                          f"out={tmp_path}", "hardware=local-cpu", "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    assert payload["rows"] > 0 and payload["files"] == 2
    missing = subprocess.run([sys.executable, "-m", "predictor.app.cli", "import-trace", str(traces[0])],
                             capture_output=True, text=True)
    assert missing.returncode != 0 and "out=DIR is required" in missing.stderr


@pytest.mark.slow
def test_cpu_trace_needs_a_hardware(traces, tmp_path):
    with pytest.raises(PrismError, match="hardware=NAME is required"):
        import_trace(traces[:1], tmp_path)
    with pytest.raises(PrismError, match="hardware=h100-sxm: a GPU profile, but .* is a CPU trace"):
        import_trace(traces[:1], tmp_path / "gpu", hardware="h100-sxm")  # CPU op times stored as an H100's
    assert not (tmp_path / "gpu").exists()


# -- bad input: one clear error each -------------------------------------------------------
@pytest.mark.parametrize("text, message", [
    ('{"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur"', "truncated"),
    ('{"schemaVersion": 1, "traceEvents": [{"ph": "X"}, ', "truncated"),
    ('{"traceEvents": [{"ph": "X", "ts": 1,, }]}', "not valid JSON"),
    ("name,latency\ngemm,3\n", "not a JSON object"),
    ('[{"ph": "X", "name": "x"}]', "JSON array"),
    ('{"displayTimeUnit": "ms", "otherData": {}}', "without a traceEvents array"),
    ('{"traceEvents": [1, 2]}', "not an event object"),
    ('{"traceEvents": [{"ph": "X", "cat": "blink", "name": "Paint", "ts": 1, "dur": 2}]}', "without PyTorch operator"),
    ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2, '
     '"args": {"Input Dims": "oops"}}]}', "event 1 .'aten::mm'. is malformed"),
    ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": "abc", "dur": 2}]}', "malformed"),
])
def test_bad_files_give_one_clear_error(tmp_path, text, message):
    path = tmp_path / "trace.json"
    path.write_text(text)
    with pytest.raises(PrismError, match=message) as err:
        import_trace([path], tmp_path / "out", hardware="local-cpu")
    assert str(path) in str(err.value)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.parquet"))


@pytest.mark.slow
def test_truncated_real_trace_and_gzip(traces, tmp_path):
    data = traces[0].read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(PrismError, match="truncated"):
        import_trace([cut], tmp_path / "out", hardware="local-cpu")
    packed = tmp_path / "rank0.json.gz"
    packed.write_bytes(gzip.compress(data))
    plain = [e for e in json.loads(data)["traceEvents"]]
    assert list(TraceStream(packed).events()) == plain


def test_stream_reads_across_chunk_boundaries(tmp_path, monkeypatch):
    import predictor.data.importers.chrome_json as cj
    monkeypatch.setattr(cj, "_CHUNK", 7)  # every value straddles a chunk
    doc = {"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": f"op{i}", "ts": 1.5 * i, "dur": 12345.678,
                                                 "args": {"Input Dims": [[i, 3]], "s": "é"}} for i in range(50)],
           "traceName": "t", "baseTimeNanoseconds": 1234567890123}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False))
    stream = TraceStream(path)
    assert list(stream.events()) == doc["traceEvents"]
    assert stream.metadata == {k: v for k, v in doc.items() if k != "traceEvents"}


# -- GPU traces: kernels charged to the op that launched them ---------------------------------
def _gpu_trace(path):
    """A minimal Kineto GPU trace: a linear's forward and its backward node, the kernels each
    launched (linked by External id), an NCCL all-reduce, and a kernel of no recognised op."""
    def op(name, ts, dur, ext, **args):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                "args": {"External id": ext, **args}}

    def kernel(name, ts, dur, ext):
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                "args": {"External id": ext, "device": 0, "stream": 7}}
    bf16 = ["c10::BFloat16", "c10::BFloat16", ""]
    events = [
        op("aten::linear", 0, 50, 1, **{"Input Dims": [[2, 1024, 4096], [8192, 4096], []], "Input type": bf16,
                                        "Sequence number": 10, "Fwd thread id": 0}),
        op("aten::matmul", 5, 40, 2, **{"Sequence number": 10, "Fwd thread id": 0}),
        op("aten::mm", 10, 30, 3, **{"Input Dims": [[2048, 4096], [4096, 8192]], "Input type": bf16[:2],
                                     "Sequence number": 10, "Fwd thread id": 0}),
        op("aten::mul", 60, 5, 4, **{"Input Dims": [[8]], "Input type": ["float"]}),
        op("autograd::engine::evaluate_function: MmBackward0", 100, 80, 5,
           **{"Sequence number": 10, "Fwd thread id": 1}),
        op("MmBackward0", 101, 78, 6, **{"Sequence number": 10, "Fwd thread id": 1}),
        op("aten::mm", 105, 30, 7, **{"Input Dims": [[2048, 8192], [8192, 4096]], "Input type": bf16[:2]}),
        op("aten::mm", 140, 30, 8, **{"Input Dims": [[8192, 2048], [2048, 4096]], "Input type": bf16[:2]}),
        op("record_param_comms", 200, 10, 9, **{"Collective name": "allreduce", "In msg nelems": 1 << 20,
                                                "Out msg nelems": 1 << 20, "Group size": 8, "dtype": "BFloat16",
                                                "Process Group Ranks": "[0, 8, 16, 24, 32, 40, 48, 56]"}),
        kernel("sm90_xmma_gemm_bf16", 20, 120.0, 3),
        kernel("sm90_xmma_gemm_bf16_dgrad", 300, 110.0, 7),
        kernel("sm90_xmma_gemm_bf16_wgrad", 420, 130.0, 8),
        kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 600, 400.0, 9),
        kernel("elementwise_kernel<mul>", 70, 3.0, 4),
    ]
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
           "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8}, "traceEvents": events}
    path.write_text(json.dumps(doc))
    return path


def test_gpu_trace_times_ops_by_their_kernels(tmp_path):
    report = import_trace([_gpu_trace(tmp_path / "gpu.json")], tmp_path / "out")
    rows = pd.read_parquet(report.run_file).set_index(["op", "pass"])
    assert report.kind == "gpu" and report.hardware == "h100-sxm"
    gemm_f, gemm_b = rows.loc[("gemm", "fwd")], rows.loc[("gemm", "bwd")]
    assert (gemm_f.m, gemm_f.n, gemm_f.k, gemm_f["dtype"]) == (2048, 8192, 4096, "bfloat16")
    assert gemm_f.latency_us == 120.0 and gemm_b.latency_us == 240.0  # dX + dW kernels
    ar = rows.loc[("all_reduce", "step")]
    assert (ar.message_bytes, ar.group_size, ar.latency_us) == (2 << 20, 8, 400.0)
    assert (ar.ranks_per_node, ar.nodes) == (1, 8)  # "Process Group Ranks" 0, 8, ...: one per node
    assert [k["name"] for k in report.unknown_kernels] == ["elementwise_kernel<mul>"]
    assert report.op_overhead_us is None  # GPU steps are not charged to CPU framework time


@pytest.mark.slow
def test_an_empty_file_or_one_given_twice_is_named(traces, tmp_path):
    empty = tmp_path / "rank0.json"
    empty.write_text("")
    with pytest.raises(PrismError, match="an empty file; export the trace again"):
        import_trace([empty], tmp_path / "out", hardware="local-cpu")
    with pytest.raises(PrismError, match="given twice"):
        import_trace([traces[0], traces[0]], tmp_path / "out", hardware="local-cpu")


def test_a_dtensor_gemm_is_left_out_not_read_at_its_global_shape(tmp_path):
    """Rank 0 of a ``small`` tp=2 step under DTensor (prism measure, this CPU): its QKV linear
    is recorded as aten::mm of the global 256x384 @ 384x640, around the shard's local
    256x384 @ 384x320 that ran, and its time holds DTensor's dispatch besides the shard's
    kernel. It was one gemm row at n=640; the output layer's plain linear stays a row."""
    report = import_trace([REPO_ROOT / "measurements" / "local-cpu-tp2-dtensor-trace-excerpt.json"],
                          tmp_path / "out", hardware="local-cpu")
    rows = store.read_samples(tmp_path / "out")
    assert len(rows) == 1 and rows.iloc[0][["op", "m", "n", "k"]].tolist() == ["gemm", 256, 4096, 384]
    assert [n for reason, n in report.skipped.items() if "DTensor" in reason] == [1]


def test_a_copy_of_a_trace_under_another_name_is_refused(tmp_path):
    """A byte-identical copy was read as a second rank: 362 rows of the one step."""
    copy = tmp_path / "copy.json.gz"
    copy.write_bytes(H100_TRACE.read_bytes())
    with pytest.raises(PrismError, match="hold the same trace .identical bytes.; pass each rank's trace once") as err:
        import_trace([H100_TRACE, copy], tmp_path / "out")
    assert str(H100_TRACE) in str(err.value) and err.value.field == str(copy)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("key", ["dur", "ts"])
def test_a_trace_with_non_finite_times_is_refused(tmp_path, key):
    """NaN durations on a fifth of the shipped trace's events imported 3 of its 181 rows, exit 0."""
    doc = json.load(gzip.open(H100_TRACE))
    timed = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    for e in timed[::5]:
        e[key] = float("nan")
    timed[1][key] = float("inf")
    path = tmp_path / "corrupt.json"
    path.write_text(json.dumps(doc))  # json writes NaN and Infinity, and reads them back
    with pytest.raises(PrismError, match=f"corrupt.json: non-finite or impossible times .*: {key} in "
                                         f"{len(timed[::5]) + 1:,} events") as err:
        import_trace([path], tmp_path / "out")
    assert err.value.field == str(path) and not (tmp_path / "out").exists()


def test_missing_file_is_named(tmp_path):
    with pytest.raises(PrismError, match="no such trace file"):
        import_trace([tmp_path / "rank0.json"], tmp_path / "out", hardware="local-cpu")


@pytest.mark.slow
def test_a_trace_imported_again_is_refused_and_two_imports_get_two_runs(traces, tmp_path):
    first = import_trace(traces[:1], tmp_path, hardware="local-cpu")
    with pytest.raises(PrismError, match="imported already, as .*count its steps twice"):
        import_trace(traces, tmp_path, hardware="local-cpu")  # rank 0's file is in the first run
    assert store.run_files(tmp_path) == [tmp_path / f"{first.run_id}.parquet"]  # nothing more written
    second = import_trace(traces[1:], tmp_path, hardware="local-cpu")  # within the same second, likely
    assert second.run_id != first.run_id and len(store.run_files(tmp_path)) == 2


def _steps_of(trace, count: int, slow: dict, path, start: float = 0.0):
    """``trace``'s one profiled step written ``count`` times one after another from ``start``
    us on (timestamps, ids and step numbers moved on), step ``k`` of ``slow`` stretched
    ``slow[k]`` times over: every event in it starts and lasts that much later and longer,
    the machine slowed down."""
    doc = json.loads(trace.read_text())
    events = [e for e in doc.pop("traceEvents") if e.get("ph") == "X"]
    t0 = min(e["ts"] for e in events)
    span = max(e["ts"] + e.get("dur", 0) for e in events) - t0 + 1000
    ids = {key: max(e.get("args", {}).get(key, 0) for e in events) + 1 for key in ("External id", "Sequence number")}
    out = []
    for k in range(count):
        factor = slow.get(k, 1.0)
        for e in events:
            e = {**e, "ts": t0 + start + (e["ts"] - t0) * factor, "args": dict(e.get("args", {}))}
            e["dur"] = e.get("dur", 0) * factor
            for key, step in ids.items():
                if key in e["args"]:
                    e["args"][key] += k * step
            if e["name"].startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{k}"
            out.append(e)
        start += span * factor
    path.write_text(json.dumps({**doc, "traceEvents": out}))
    return path


@pytest.mark.slow
def test_a_profiled_step_that_ran_over_twice_the_median_is_left_out(traces, tmp_path):
    """A step whose every call ran three times slower (the machine, not the calls) would
    enter the samples as each call's spread; it is named and its calls left out."""
    even = import_trace([_steps_of(traces[0], 3, {}, tmp_path / "even.json")], tmp_path / "a", hardware="local-cpu")
    slowed = import_trace([_steps_of(traces[0], 3, {1: 3.0}, tmp_path / "slow.json")], tmp_path / "b",
                          hardware="local-cpu")
    assert even.disturbed_steps == [] and even.steps == 3
    assert [d["step"] for d in slowed.disturbed_steps] == [1] and slowed.steps == 2
    assert slowed.disturbed_steps[0]["ms"] > 2 * slowed.step_ms_median
    assert slowed.rows == even.rows * 2 // 3
    assert "disturbed      slow.json step #1 ran" in slowed.table()
    kept, all_three = pd.read_parquet(slowed.run_file), pd.read_parquet(even.run_file)
    assert kept.groupby(["op", "pass"]).size().mul(3).equals(all_three.groupby(["op", "pass"]).size().mul(2))
    # of two steps neither is the odd one out
    two = import_trace([_steps_of(traces[0], 2, {1: 3.0}, tmp_path / "two.json")], tmp_path / "c",
                       hardware="local-cpu")
    assert two.disturbed_steps == [] and two.steps == 2
    # prism measure writes a step per file, each numbered alike by its own profiler cycle
    files = [_steps_of(traces[0], 1, {0: 3.0} if k == 2 else {}, tmp_path / f"rank0.step{k}.json", start=1e6 * k)
             for k in range(3)]
    apart = import_trace(files, tmp_path / "d", hardware="local-cpu")
    assert [(d["file"], d["step"]) for d in apart.disturbed_steps] == [("rank0.step2.json", 0)]
    assert apart.steps == 2 and apart.rows == even.rows * 2 // 3

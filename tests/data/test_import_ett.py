"""`prism import-ett`: the estimate-train-time layout mapped onto PRISM's vocabulary.

The real-data tests read the shipped data/ett (the ``reference_data`` fixture);
the small synthetic folders below cover bad input everywhere.
"""
import hashlib
import json
import math

import pandas as pd
import pytest

from predictor.app.cli import main
from predictor.core.errors import PrismError
from predictor.core.ops import OPS
from predictor.data import store
from predictor.data.importers.ett import (
    LEFT_OUT,
    ImportReport,
    ett_baseline,
    import_ett,
    partition_vocab,
)

A100 = "NVIDIAA100-SXM4-80GB"
_IMPORTS = {}


@pytest.fixture
def perlmutter(reference_data, tmp_path_factory):
    """One import of Perlmutter shared by the tests of this module: (report, out_dir, folder)."""
    if "perlmutter" not in _IMPORTS:
        out = tmp_path_factory.mktemp("ett-store")
        folder = reference_data / "ett" / "Perlmutter"
        _IMPORTS["perlmutter"] = (import_ett(folder, out), out, folder)
    return _IMPORTS["perlmutter"]


@pytest.fixture
def rows(perlmutter):
    return store.read_samples(perlmutter[1])


def _md5(path):
    return hashlib.md5(open(path, "rb").read()).hexdigest()


# ---------------------------------------------------------------------------------- real data

def test_perlmutter_becomes_one_run_of_vocabulary_rows(perlmutter, rows):
    report, out, _ = perlmutter
    assert isinstance(report, ImportReport)
    run = out / "ett-perlmutter.parquet"
    assert store.run_files(out) == [run] and report.run_file == str(run)
    assert len(rows) == report.rows == sum(report.rows_per_op.values()) == sum(report.rows_per_function.values())
    assert set(rows.op) <= set(OPS)
    for op, g in rows.groupby("op"):
        assert set(g["pass"]) <= set(OPS[op].passes), op
    assert (rows.latency_us > 0).all()
    assert set(rows.hardware) == {"a100-sxm4-80gb"} and set(rows.device_name) == {A100}
    assert set(rows.dtype) == {"float16"} and set(rows.run_id) == {"ett-perlmutter"}
    compute = rows[~rows.op.isin([o for o in OPS if OPS[o].collective])]
    assert set(compute.backend) == {"cuda"} and (compute.world_size == 1).all()
    assert set(rows[rows.op == "all_reduce"].backend) == {"nccl"}
    meta = store.read_run_metadata(report.run_file)
    assert meta["source"]["repository"].endswith("estimate-train-time") and "3rd-7th" in meta["statistic"]
    skipped = {f["file"]: f["reason"] for f in report.skipped_files}
    assert "unknown setup" in skipped.pop(f"operator/{A100}_optimizer_fp16.csv") and report.skipped_rows == []
    # ETT's stage optimizers time a fresh FusedAdam's first step, its state created per tensor
    assert skipped == {f"operator/{A100}_{s}Stage_optimizer_fp16.csv": LEFT_OUT[f"{s}Stage_optimizer"]
                       for s in ("first", "middle", "last")}
    assert "optimizer_step" not in set(rows.op)


def test_rows_per_function_equal_the_csv_rows(perlmutter, rows):
    report, _, folder = perlmutter
    expected = {}
    for path in sorted((folder / "operator").glob(f"{A100}_*_fp16.csv")):
        function = path.name[len(A100) + 1:-len("_fp16.csv")]
        if function in LEFT_OUT:
            continue
        df = pd.read_csv(path)
        expected[function] = len(df) * (2 if "B_dur(us)" in df.columns else 1)
    for function in ("allreduce", "allreduce_large", "allgather_large", "p2p"):
        files = sorted((folder / "nccl").glob(f"{A100}_{function}_fp16*.csv"))
        # the pooled file and the per-topology files share measurements: each counts once
        expected[function] = len(pd.concat([pd.read_csv(f) for f in files]).drop_duplicates())
    got = rows.groupby("origin").size().to_dict()
    assert got == {f"ett:Perlmutter/{f}": n for f, n in expected.items()}
    assert report.rows_per_function == {f: expected[f] for f in report.rows_per_function}
    assert {"linear1", "flash_atten", "allreduce"} <= set(expected)


def test_nccl_overlap_is_reported(perlmutter):
    report, _, _ = perlmutter
    overlap = {o["function"]: o for o in report.nccl_overlap}
    ar = overlap["allreduce"]
    assert ar["pooled_files"] == 1 and ar["per_topology_files"] == 5 and ar["shared"] > 0
    assert ar["imported"] == ar["per_topology_rows"] + ar["pooled_only"] - ar["duplicates_dropped"]
    assert ar["shared"] + ar["pooled_only"] == ar["pooled_rows"]
    assert overlap["p2p"]["pooled_files"] == 0


def test_spot_checked_shapes(perlmutter, rows):
    folder = perlmutter[2] / "operator"

    def first(function, pass_):
        return rows[(rows.origin == f"ett:Perlmutter/{function}") & (rows["pass"] == pass_)].iloc[0]

    src = pd.read_csv(folder / f"{A100}_linear1_fp16.csv").iloc[0]
    mp, b, seq, dim = (int(src[c]) for c in ("mp", "b", "l", "dim"))
    fwd, bwd = first("linear1", "fwd"), first("linear1", "bwd")
    assert (fwd.op, fwd.m, fwd.k, fwd.n) == ("gemm", b * seq, dim, 3 * dim // mp)
    assert fwd.latency_us == src["F_dur(us)"] and bwd.latency_us == src["B_dur(us)"]

    lf = rows[(rows.origin == "ett:Perlmutter/linear_final") & (rows["pass"] == "fwd")]
    assert set(lf.n) <= {partition_vocab(m) for m in (1, 2, 4, 8, 16)} and 50304 in set(lf.n)
    assert partition_vocab(1) == 50304 and partition_vocab(2) == 25216  # ceil(50257/(128 mp))*128

    src = pd.read_csv(folder / f"{A100}_flash_atten_fp16.csv").iloc[0]
    att = first("flash_atten", "fwd")
    assert (att.op, att.batch, att.heads, att.kv_heads, att.seq_q, att.head_dim, att.causal) == (
        "attention", src.b, src.h // src.mp, src.h // src.mp, src.l, src.dim // src.h, False)

    src = pd.read_csv(folder / f"{A100}_RoPE_fp16.csv").iloc[0]
    rope = first("RoPE", "fwd")  # q and k rotated in the one timed call
    assert (rope.tokens, rope.heads, rope.head_dim) == (src.b * src.l, 2 * src.h // src.mp, src.dim // src.h)

    src = pd.read_csv(folder / f"{A100}_baddbmm_fp16.csv").iloc[0]
    qk = first("baddbmm", "fwd")
    assert (qk.op, qk.batch, qk.m, qk.n, qk.k) == ("bmm", src.b * src.h // src.mp, src.l, src.l, src.dim // src.h)

    causal = rows[rows.origin == "ett:Perlmutter/ScaledUpperTriangMaskedSoftmax"]
    plain = rows[rows.origin == "ett:Perlmutter/softmax"]
    assert set(causal.causal) == {True} and set(plain.causal) == {False} and set(causal.op) == {"softmax"}


def test_collective_message_bytes(perlmutter, rows):
    folder = perlmutter[2] / "nccl"
    src = pd.read_csv(folder / f"{A100}_allgather_large_fp16_2_4.csv").iloc[0]
    ag = rows[(rows.origin == "ett:Perlmutter/allgather_large") & (rows.nodes == 2) & (rows.ranks_per_node == 4)]
    row = ag[ag.latency_us == src["dur(us)"]].iloc[0]
    # ETT's shape is each rank's input; PRISM's all_gather counts the gathered output
    assert row.message_bytes == src["shape"] * 2 * 8 and row.group_size == row.world_size == 8
    src = pd.read_csv(folder / f"{A100}_allreduce_fp16_1_4.csv").iloc[0]
    ar = rows[(rows.origin == "ett:Perlmutter/allreduce") & (rows.latency_us == src["dur(us)"])].iloc[0]
    assert (ar.op, ar.message_bytes, ar.group_size, ar.nodes, ar.ranks_per_node) == (
        "all_reduce", src["shape"] * 2, 4, 1, 4)
    assert set(rows[rows.origin == "ett:Perlmutter/p2p"].op) == {"send_recv"}


def test_a_second_import_of_the_same_tables_keeps_the_first_run(perlmutter):
    # a rerun (of an import stopped after its write) answers with the run it wrote, writing nothing
    report, out, folder = perlmutter
    digest = _md5(report.run_file)
    again = import_ett(folder, out)
    assert (again.rows, again.rows_per_op, again.run_file) == (report.rows, report.rows_per_op, report.run_file)
    assert _md5(report.run_file) == digest and store.run_files(out) == [out / "ett-perlmutter.parquet"]


def test_bad_paths_give_one_clear_error(reference_data, tmp_path):
    with pytest.raises(PrismError, match="no such folder"):
        import_ett(reference_data / "ett" / "Nowhere", tmp_path)
    with pytest.raises(PrismError, match="Perlmutter, Vista"):
        import_ett(reference_data / "ett", tmp_path)  # the parent of the clusters
    assert list(tmp_path.iterdir()) == []


def test_a_folder_of_left_out_files_says_why_none_is_imported(tmp_path):
    optimizer = "mp,dim,encoders,dur(us)\n1,2048,4,5690.2\n"
    root = _cluster(tmp_path, {f"operator/{A100}_middleStage_optimizer_fp16.csv": optimizer})
    with pytest.raises(PrismError, match="not imported.*middleStage_optimizer.*first step of a fresh FusedAdam"):
        import_ett(root, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_vista_maps_to_gh200_and_flags_implausible_rows(reference_data, tmp_path):
    report = import_ett(reference_data / "ett" / "Vista", tmp_path)
    assert report.hardware == "gh200" and report.device_name == "NVIDIAGH200120GB"
    flagged = {(s["origin"], s["pass"]) for s in report.suspect}
    # its flash-attention "backward" is mostly shorter than its forward, below the roofline
    assert ("ett:Vista/flash_atten", "bwd") in flagged


def test_baseline_reads_the_authors_summaries(reference_data):
    base = ett_baseline(reference_data / "ett" / "Perlmutter")
    assert list(base.columns) == ["origin", "hardware", "op", "pass", "nodes", "ranks_per_node",
                                  "best_model", "best_error"]
    assert set(base["pass"]) == {"fwd", "bwd", "step"}
    row = base[(base.origin == "ett:Perlmutter/linear1") & (base["pass"] == "fwd")].iloc[0]
    assert row.op == "gemm" and (row.nodes, row.ranks_per_node) == (1, 1) and 0 < row.best_error < 1
    pooled = base[(base.nodes == 0) & (base.ranks_per_node == 0)]
    assert set(pooled.origin) == {f"ett:Perlmutter/{f}" for f in ("allgather_large", "allreduce", "allreduce_large")}
    topo = base[(base.origin == "ett:Perlmutter/allreduce") & (base.nodes == 2) & (base.ranks_per_node == 4)]
    assert len(topo) == 1 and topo.iloc[0].op == "all_reduce"


# ------------------------------------------------------------------------- synthetic folders

def _cluster(tmp_path, files, name="Mini"):
    root = tmp_path / name
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


_LINEAR1 = "mp,b,l,dim,F_dur(us),B_dur(us)\n1,2,1024,2048,100.0,200.0\n2,2,1024,2048,60.0,0\n"


def test_bad_rows_are_skipped_with_reasons_and_odd_files_listed(tmp_path):
    root = _cluster(tmp_path, {
        f"operator/{A100}_linear1_fp16.csv": _LINEAR1 + "3,2,1024,2048,50.0,90.0\nx,2,1024,2048,50.0,90.0\n"
                                              "1,4,1024,2048,100000.0,400.0\n",  # a 100 ms forward
        f"operator/{A100}_moe_bf16.csv": "mp,b,l,dim,moe_num_experts,intermediate_size,top_k,F_dur(us),B_dur(us)\n",
        f"operator/{A100}.csv": "GPU,Function,Precision,Propagation,Best_model,Best_config,Best_error%\n",
        "operator/notes.txt": "hello",
        f"nccl/{A100}_allreduce_fp16_1_2.csv": "shape,nodes,GPUsPerNode,dur(us)\n1048576,1,2,80.0\n1048576,2,2,90.0\n",
        f"nccl/{A100}_allreduce_fp16.csv": "shape,nodes,GPUsPerNode,dur(us)\n1048576,1,2,80.0\n2097152,1,2,120.0\n",
    })
    report = import_ett(root, tmp_path / "out")
    df = store.read_samples(report.run_file)
    assert report.rows_per_function == {"linear1": 4, "allreduce": 2}
    reasons = " | ".join(f"{s['file']}: {s['rows']} {s['reason']}" for s in report.skipped_rows)
    assert "B_dur(us): missing, zero, negative or over an hour" in reasons                # the 0 backward
    assert "dim not divisible by mp" in reasons                             # mp 3
    assert "column mp: missing, non-numeric" in reasons                     # 'x'
    assert "differ from the file name" in reasons                           # nodes 2 in a _1_2 file
    assert "fwd: over 100x slower (floor-relative) than the median row" in reasons  # the 100 ms forward
    skipped = {s["file"]: s["reason"] for s in report.skipped_files}
    assert "no PRISM op" in skipped[f"operator/{A100}_moe_bf16.csv"] and "not a CSV" in skipped["operator/notes.txt"]
    ar = df[df.op == "all_reduce"]
    assert sorted(ar.message_bytes) == [2 * 1048576, 2 * 2097152]          # the shared row once
    assert set(df.origin) == {"ett:Mini/linear1", "ett:Mini/allreduce"} and set(df.host) == {"Mini"}


def test_a_file_missing_a_column_names_the_file_and_column(tmp_path):
    root = _cluster(tmp_path, {f"operator/{A100}_gelu_fp16.csv": "mp,b,l,F_dur(us),B_dur(us)\n1,2,1024,5.0,6.0\n"})
    with pytest.raises(PrismError, match=r"gelu_fp16\.csv: missing column\(s\) dim"):
        import_ett(root, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_unknown_gpu_names_the_file(tmp_path):
    root = _cluster(tmp_path, {"operator/NVIDIAMysteryGPU_linear1_fp16.csv": _LINEAR1})
    with pytest.raises(PrismError, match="NVIDIAMysteryGPU_linear1_fp16.csv: GPU 'NVIDIAMysteryGPU'"):
        import_ett(root, tmp_path / "out")


def test_cli_imports_with_out_and_prints_json(tmp_path, capsys):
    root = _cluster(tmp_path, {f"operator/{A100}_linear1_fp16.csv": _LINEAR1})
    assert main(["import-ett", str(root), f"out={tmp_path / 'store'}", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rows_per_op"] == {"gemm": 3} and report["run_id"] == "ett-mini"
    assert main(["samples", str(tmp_path / "store")]) == 0               # positional-only verb unchanged
    assert "gemm" in capsys.readouterr().out
    assert main(["import-ett", str(root)]) == 2                          # out= is required
    assert "out=DIR is required" in capsys.readouterr().err
    assert main(["import-ett", str(root), f"out={tmp_path / 'store'}"]) == 0  # the same tables: the run kept
    capsys.readouterr()
    table = root / "operator" / f"{A100}_linear1_fp16.csv"
    table.write_text(table.read_text() + table.read_text().splitlines()[-1] + "\n")
    assert main(["import-ett", str(root), f"out={tmp_path / 'store'}"]) == 2  # other tables: never overwritten
    assert "already exists, imported from other sources" in capsys.readouterr().err
    assert main(["import-ett", str(root), "outdir=x"]) == 2
    assert math.isfinite(report["elapsed_s"])

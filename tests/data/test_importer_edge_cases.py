"""Importers on traces with bytes and times no profiler writes, and on tables and folders
they dropped files and rows of without a word; what prism samples counts (probe 7)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from predictor.core.errors import PrismError
from predictor.core.profiles import DATA_DIR, REPO_ROOT
from predictor.data import store
from predictor.data.importers.ett import import_ett
from predictor.data.importers.microbench import import_microbench
from predictor.data.importers.trace import import_trace
from predictor.data.summary import summarize


@pytest.fixture(scope="module")
def linear_trace(tmp_path_factory):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile
    layer, x = torch.nn.Linear(16, 8), torch.randn(4, 16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        layer(x).sum().backward()
    path = tmp_path_factory.mktemp("traces") / "rank0.json"
    prof.export_chrome_trace(str(path))
    return path


def test_a_byte_order_mark_and_a_plain_file_named_gz_are_read(linear_trace, tmp_path):
    """The mark read as 'not a JSON object (near byte 0)'; plain JSON named .json.gz as BadGzipFile."""
    want = import_trace([linear_trace], tmp_path / "plain", hardware="local-cpu").rows_per_op
    marked, named = tmp_path / "bom.json", tmp_path / "plain.json.gz"
    marked.write_bytes(b"\xef\xbb\xbf" + linear_trace.read_bytes())
    named.write_bytes(linear_trace.read_bytes())
    assert import_trace([marked], tmp_path / "a", hardware="local-cpu").rows_per_op == want
    assert import_trace([named], tmp_path / "b", hardware="local-cpu").rows_per_op == want


def _edited(trace: Path, out: Path, edit) -> Path:
    doc = json.loads(trace.read_text())
    for e in doc["traceEvents"]:
        if e.get("cat") == "cpu_op" and e.get("name") == "aten::linear":
            edit(e)
    out.write_text(json.dumps(doc))
    return out


def test_negative_or_impossible_durations_are_refused(linear_trace, tmp_path):
    """A negative dur fed the framework-time rows 3-5x too much; a dur of 1e20 us was stored
    and the calls 'covered 46638814640639896%' of the step."""
    negative = _edited(linear_trace, tmp_path / "neg.json", lambda e: e.update(dur=-5))
    with pytest.raises(PrismError, match=r"dur < 0 in 1 events, first at event \d+ \('aten::linear'\)"):
        import_trace([negative], tmp_path / "a", hardware="local-cpu")
    huge = _edited(linear_trace, tmp_path / "huge.json", lambda e: e.update(dur=1e20))
    with pytest.raises(PrismError, match="dur over an hour in 1 events"):
        import_trace([huge], tmp_path / "c", hardware="local-cpu")
    missing = _edited(linear_trace, tmp_path / "nots.json", lambda e: e.pop("ts"))
    with pytest.raises(PrismError, match="'aten::linear'\\) is malformed: it lacks its 'ts' field"):
        import_trace([missing], tmp_path / "b", hardware="local-cpu")
    assert not list(tmp_path.glob("*/*.parquet"))


GEMM = "op_gemm_xla_perf_table.csv"


A100 = "NVIDIAA100-SXM4-80GB"


def test_microbench_counts_gemms_of_an_unknown_dtype_and_refuses_a_table_without_the_device(tmp_path):
    folder = shutil.copytree(DATA_DIR / "microbench", tmp_path / "microbench")
    table = pd.read_csv(folder / GEMM)
    h100 = table.device_key == table.device_key[table.device_key.str.contains("90", na=False)].iloc[0]
    base = import_microbench(folder, "h100-sxm", tmp_path / "a")
    table.loc[h100, "dtype"] = "int4xint4->int4"
    table.to_csv(folder / GEMM, index=False)
    odd = import_microbench(folder, "h100-sxm", tmp_path / "b")
    assert odd.rows.get("gemm/fwd", 0) == 0 and any("gemm dtype outside" in k for k in odd.left_out)
    assert sum(odd.left_out.values()) > sum(base.left_out.values())
    table[~h100].to_csv(folder / GEMM, index=False)
    gone = import_microbench(folder, "h100-sxm", tmp_path / "c")
    assert any(k.startswith("gemm: none, the table has no row of device_key=") for k in gone.left_out)


def test_ett_names_a_sample_file_it_cannot_read_a_missing_folder_and_hour_long_times(tmp_path):
    root = tmp_path / "Mini"
    (root / "operator").mkdir(parents=True)
    (root / "operator" / f"{A100}_linear1_fp16.csv").write_text(
        "mp,b,l,dim,F_dur(us),B_dur(us)\n1,2,1024,2048,100.0,200.0\n1,4,1024,2048,1e15,400.0\n")
    (root / "operator" / f"{A100}_linear2_fp16.csv").mkdir()  # a folder under a sample file's name
    report = import_ett(root, tmp_path / "out")
    skipped = {s["file"]: s["reason"] for s in report.skipped_files}
    assert "not a readable file" in skipped[f"operator/{A100}_linear2_fp16.csv"]
    assert skipped["nccl/"].startswith("missing")
    assert any("over an hour" in s["reason"] and s["rows"] == 1 for s in report.skipped_rows)


def test_prism_samples_counts_the_rows_train_fits(tmp_path, capsys):
    """all_reduce showed 500 rows where train fits 300: the gap curve's rows were counted."""
    rows = store.read_samples(REPO_ROOT / "samples" / "local-cpu")
    gap = rows[rows.op == "all_reduce"].head(20).assign(origin="collective_gap:500")
    folder = tmp_path / "s"
    store.write_run(pd.concat([rows[rows.op == "all_reduce"], gap]), folder, "r", {"hardware": "local-cpu"})
    assert summarize(folder).set_index("op").loc["all_reduce", "rows"] == (rows.op == "all_reduce").sum()

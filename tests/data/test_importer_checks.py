"""New-user faults of the importers (probe 6): imports that wrote nothing, or dropped a table or
a column, and said nothing."""
import gzip
import shutil

import pytest

from predictor.app.cli import main
from predictor.core.errors import PrismError
from predictor.core.profiles import DATA_DIR
from predictor.data import store
from predictor.data.importers.ett import import_ett
from predictor.data.importers.microbench import import_microbench
from predictor.data.importers.trace import import_trace

A100 = "NVIDIAA100-SXM4-80GB"
GEMM = "op_gemm_xla_perf_table.csv"


def _record(path, shapes: bool, program: str = "linear"):
    """A torch.profiler CPU trace of a small nn.Linear forward and backward (or of a program
    of no op PRISM knows), recorded with or without shapes."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile
    layer, x = torch.nn.Linear(16, 8), torch.randn(4, 16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes) as prof:
        if program == "linear":
            layer(x).sum().backward()
        else:
            torch.sort(torch.randn(100))
            torch.randn(5).cumsum(0)
    prof.export_chrome_trace(str(path))
    return path


@pytest.fixture(scope="module")
def shaped(tmp_path_factory):
    return _record(tmp_path_factory.mktemp("traces") / "rank0.json", shapes=True)


# -- 1. an import of no rows is an error, a trace without shapes named as such ----------------

def test_a_trace_recorded_without_shapes_says_how_to_record_one(tmp_path, capsys):
    """It exited 0, wrote nothing and listed aten::linear among the unknown ops."""
    trace = _record(tmp_path / "rank0.json", shapes=False)
    assert main(["import-trace", str(trace), f"out={tmp_path / 'out'}", "hardware=local-cpu"]) == 2
    err = capsys.readouterr().err
    assert f"{trace}: recorded without shapes" in err and "aten::linear" in err
    assert "torch.profiler.profile(..., record_shapes=True)" in err
    assert not list(tmp_path.glob("out/*.parquet"))


def test_a_trace_of_no_recognised_op_is_an_error_naming_the_file(tmp_path):
    trace = _record(tmp_path / "sort.json", shapes=True, program="sort")
    with pytest.raises(PrismError, match="no call of an op PRISM recognises .*aten::sort.*nothing written") as err:
        import_trace([trace], tmp_path / "out", hardware="local-cpu")
    assert str(trace) in str(err.value) and err.value.field == str(trace)
    assert not list(tmp_path.glob("out/*.parquet"))


# -- 2. a gzipped trace under a .json name ----------------------------------------------------

def test_a_gzipped_trace_named_json_is_read_as_gzip(shaped, tmp_path):
    """It was 'not UTF-8 text (invalid start byte at byte <the file's size>)'."""
    packed = tmp_path / "rank0.json"
    packed.write_bytes(gzip.compress(shaped.read_bytes()))
    report = import_trace([packed], tmp_path / "out", hardware="local-cpu")
    assert report.rows_per_op == import_trace([shaped], tmp_path / "plain", hardware="local-cpu").rows_per_op
    assert report.rows_per_op["gemm"] > 0


def test_a_byte_that_is_no_utf8_is_named_at_its_offset(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_bytes(b'{"traceEvents": [], "x": "\xff"}')  # was: at byte 29, the file's size
    with pytest.raises(PrismError, match=r"not UTF-8 text \(invalid start byte at byte 26\)"):
        import_trace([bad], tmp_path / "out", hardware="local-cpu")


# -- 3. a table or file cut to its header line ------------------------------------------------

def test_a_microbench_table_cut_to_its_header_is_named_and_nothing_written(tmp_path, capsys):
    """The B200 GEMMs vanished from the run, exit 0."""
    folder = shutil.copytree(DATA_DIR / "microbench", tmp_path / "microbench")
    table = folder / GEMM
    table.write_text(table.read_text().splitlines()[0] + "\n")
    with pytest.raises(PrismError, match=f"no rows for hardware=b200 in {GEMM}: it holds only its header line; "
                       f"nothing written") as err:
        import_microbench(folder, "b200", tmp_path / "out")
    assert err.value.field == str(table)
    assert main(["import-microbench", str(folder), f"out={tmp_path / 'out'}", "hardware=b200"]) == 2
    assert GEMM in capsys.readouterr().err
    assert not list(tmp_path.glob("out/*.parquet"))


@pytest.mark.parametrize("name, header", [
    (f"operator/{A100}_gelu_fp16.csv", "mp,b,l,dim,F_dur(us),B_dur(us)\n"),
    (f"nccl/{A100}_allreduce_fp16_1_2.csv", "shape,nodes,GPUsPerNode,dur(us)\n"),
])
def test_an_ett_file_cut_to_its_header_is_named_and_nothing_written(tmp_path, name, header):
    """The function was left out of the run without a 'skipped file' line, exit 0."""
    root = tmp_path / "Mini"
    files = {f"operator/{A100}_linear1_fp16.csv": "mp,b,l,dim,F_dur(us),B_dur(us)\n1,2,1024,2048,100.0,200.0\n",
             name: header}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    with pytest.raises(PrismError, match="only its header line, no rows; restore the file") as err:
        import_ett(root, tmp_path / "out")
    assert err.value.field == str(root / name)
    assert not (tmp_path / "out").exists() or not store.run_files(tmp_path / "out")


# -- 4. a column named twice ------------------------------------------------------------------

def test_a_microbench_column_named_twice_is_refused(tmp_path):
    """pandas read the second one as 'time_us_derived.1' and the first won, unsaid."""
    folder = shutil.copytree(DATA_DIR / "microbench", tmp_path / "microbench")
    table = folder / GEMM
    lines = table.read_text().splitlines()
    table.write_text("\n".join([lines[0] + ",time_us_derived"] + [line + ",1.0" for line in lines[1:]]) + "\n")
    with pytest.raises(PrismError, match=f"{GEMM}: column 'time_us_derived' appears twice; keep one") as err:
        import_microbench(folder, "b200", tmp_path / "out")
    assert err.value.field == str(table) and not (tmp_path / "out").exists()


@pytest.mark.parametrize("second", ["F_dur(us)", " F_dur(us)"])  # the same once stripped
def test_an_ett_column_named_twice_is_refused(tmp_path, second):
    root = tmp_path / "Mini"
    (root / "operator").mkdir(parents=True)
    sample = root / "operator" / f"{A100}_linear1_fp16.csv"
    sample.write_text(f"mp,b,l,dim,F_dur(us),B_dur(us),{second}\n1,2,1024,2048,100.0,200.0,1.0\n")
    with pytest.raises(PrismError, match=r"linear1_fp16.csv: column 'F_dur\(us\)' appears twice; keep one"):
        import_ett(root, tmp_path / "out")
    assert not (tmp_path / "out").exists()

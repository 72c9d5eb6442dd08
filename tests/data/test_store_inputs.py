"""Probe 5: the sample store and its importers on input a user really holds.

A trace imported again in another dress (gzipped, re-indented), a run file copied inside
its store, text in a published table's number column, and the advice given for a folder
that holds no sample runs. Each test reads the repository's own data, copied into its
``tmp_path``.
"""
from __future__ import annotations

import gzip
import json
import shutil

import pandas as pd
import pyarrow.parquet as pq
import pytest

from predictor.app.cli import main
from predictor.core.errors import PrismError
from predictor.core.profiles import DATA_DIR, REPO_ROOT
from predictor.data import store
from predictor.data.importers.microbench import TABLES, import_microbench
from predictor.data.importers.trace import import_trace

EXCERPT = REPO_ROOT / "measurements" / "local-cpu-tp2-dtensor-trace-excerpt.json"  # a CPU trace: one row
MICROBENCH = DATA_DIR / "microbench"
LOCAL_RUN = next((REPO_ROOT / "samples" / "local-cpu").glob("*.parquet"))
MODEL_SET = REPO_ROOT / "models" / "local-cpu"


# -- 1. a trace is known by its events, not its bytes ------------------------------------------

def _dressed(trace, folder, how: str):
    """``trace`` written again into ``folder``: gzipped, or re-indented by json.dump."""
    folder.mkdir(exist_ok=True)
    if how == "gzipped":
        path = folder / f"{trace.name}.gz"
        path.write_bytes(gzip.compress(trace.read_bytes()))
    else:
        path = folder / trace.name
        path.write_text(json.dumps(json.loads(trace.read_text()), indent=4))
    return path


@pytest.mark.parametrize("how", ["gzipped", "reindented"])
def test_a_trace_imported_again_gzipped_or_reindented_is_refused(tmp_path, how):
    """The same trace gzipped or written again with other whitespace was a new file's bytes:
    imported a second time, its steps counted twice."""
    trace = shutil.copy(EXCERPT, tmp_path / "rank0.json")
    first = import_trace([trace], tmp_path / "store", hardware="local-cpu")
    again = _dressed(trace, tmp_path / "again", how)
    with pytest.raises(PrismError, match="imported already, as .*count its steps twice") as err:
        import_trace([again], tmp_path / "store", hardware="local-cpu")
    assert first.run_file in str(err.value) and err.value.field == str(again)
    assert store.run_files(tmp_path / "store") == [tmp_path / "store" / f"{first.run_id}.parquet"]


def test_a_gzipped_copy_given_beside_its_trace_is_refused(tmp_path):
    trace = shutil.copy(EXCERPT, tmp_path / "rank0.json")
    packed = _dressed(trace, tmp_path / "packed", "gzipped")
    with pytest.raises(PrismError, match="hold the same trace .the same events.*pass each rank's trace once") as err:
        import_trace([trace, packed], tmp_path / "store", hardware="local-cpu")
    assert str(trace) in str(err.value) and err.value.field == str(packed)
    assert not list(tmp_path.glob("store/*.parquet"))


def test_a_run_imported_before_the_events_fingerprint_still_refuses_the_same_bytes(tmp_path):
    """A run written by the importer before it kept ``event_fingerprints`` holds only its
    files' byte fingerprints: the byte-identical file is still refused, before it is read."""
    trace = shutil.copy(EXCERPT, tmp_path / "rank0.json")
    run = import_trace([trace], tmp_path / "store", hardware="local-cpu").run_file
    table = pq.read_table(run)
    meta = json.loads(table.schema.metadata[store.METADATA_KEY])
    assert len(meta.pop("event_fingerprints")) == 1
    pq.write_table(table.replace_schema_metadata({store.METADATA_KEY: json.dumps(meta).encode()}), run)
    with pytest.raises(PrismError, match=f"imported already, as {run}"):
        import_trace([shutil.copy(trace, tmp_path / "copy.json")], tmp_path / "store", hardware="local-cpu")


# -- 2. one run, one file --------------------------------------------------------------------

def test_a_run_file_copied_inside_its_store_is_refused_naming_both(tmp_path, capsys):
    """A run file copied to b.parquet was read twice: prism samples doubled its rows and
    prism train trained on every row twice."""
    folder = tmp_path / "store"
    folder.mkdir()
    run = shutil.copy(LOCAL_RUN, folder / LOCAL_RUN.name)
    copy = shutil.copy(LOCAL_RUN, folder / "b.parquet")
    with pytest.raises(PrismError, match="both hold run .*read twice. Remove one copy") as err:
        store.read_samples(folder)
    assert str(run) in str(err.value) and str(copy) in str(err.value)
    assert main(["samples", str(folder)]) == 2
    assert "Remove one copy" in capsys.readouterr().err
    assert main(["train", f"samples={folder}", "hardware=local-cpu", f"models_dir={tmp_path / 'models'}"]) == 2
    assert "Remove one copy" in capsys.readouterr().err and not (tmp_path / "models").exists()
    assert len(store.read_samples(run)) == len(pd.read_parquet(LOCAL_RUN))  # one file alone reads as before


# -- 3. text in a published table's number column --------------------------------------------

#: Per table, the rows h100-sxm's import reads (it reads all four tables).
_H100_ROWS = {
    "op_gemm_xla_perf_table.csv": lambda t: (t.device_key == "sm_90") & (t.dtype == "bf16xbf16->bf16"),
    "op_flashattention_tflops.csv": lambda t: (t.gpu == "H100-SXM5-80GB") & (t.implementation == "FlashAttention-2"),
    "comm_nccl_tests_allreduce.csv": lambda t: t.system.str.contains("DGX H100") & (t.nodes == 1),
    "comm_xla_collective_perf_table.csv": lambda t: (t.device_key == "sm_90") & (t.opcode == "all-reduce"),
}


def _with_text(tmp_path, table: str, column: str, text: str):
    """A copy of data/microbench where the first row h100-sxm reads of ``table`` holds ``text`` in ``column``."""
    folder = tmp_path / "microbench"
    shutil.copytree(MICROBENCH, folder)
    frame = pd.read_csv(folder / table)
    frame[column] = frame[column].astype(object)
    frame.loc[frame.index[_H100_ROWS[table](frame)][0], column] = text
    frame.to_csv(folder / table, index=False)
    return folder


@pytest.mark.parametrize("table,column", [(t, c) for t, (_, numbers) in TABLES.items() for c in numbers])
def test_text_in_any_number_column_leaves_its_row_out_counted(tmp_path, table, column):
    """'abc' in m of the GEMM table was a ValueError, oop_time_us='fast' or tflops='fast' a
    TypeError: a traceback. Such a row is left out like a blank or negative one, counted
    under its file and column, and the rows written and left out still add up."""
    clean = import_microbench(MICROBENCH, "h100-sxm", tmp_path / "clean")
    damaged = import_microbench(_with_text(tmp_path, table, column, "fast"), "h100-sxm", tmp_path / "damaged")
    assert damaged.left_out[f"{table}: text in number column {column!r}"] == 1
    assert sum(damaged.rows.values()) + sum(damaged.left_out.values()) == \
        sum(clean.rows.values()) + sum(clean.left_out.values())


def test_the_cli_names_the_file_and_column_of_text_it_left_out(tmp_path, capsys):
    folder = _with_text(tmp_path, "op_gemm_xla_perf_table.csv", "m", "abc")
    assert main(["import-microbench", str(folder), f"out={tmp_path / 'out'}", "hardware=h100-sxm"]) == 0
    assert "left out: 1 rows, op_gemm_xla_perf_table.csv: text in number column 'm'" in capsys.readouterr().out


# -- 4. a folder without runs: what it is, and the command it needs ---------------------------

def _advice(capsys, folder) -> str:
    """What prism samples and prism train say of ``folder``: the same advice, as an error."""
    assert main(["samples", str(folder)]) == 2
    said = capsys.readouterr().err
    assert main(["train", f"samples={folder}", "hardware=local-cpu", f"models_dir={folder.parent / 'm'}"]) == 2
    assert store.no_runs(folder) in said and store.no_runs(folder) in capsys.readouterr().err
    return store.no_runs(folder)


def test_a_model_set_is_named_as_one_not_sent_to_import_microbench(tmp_path, capsys):
    models = tmp_path / "models"
    shutil.copytree(MODEL_SET, models / "local-cpu")
    advice = _advice(capsys, models / "local-cpu")
    assert "is a trained model set of local-cpu" in advice and f"models_dir={models}" in advice
    assert "import-microbench" not in advice
    advice = _advice(capsys, models)
    assert "holds trained model sets (local-cpu)" in advice and f"models_dir={models}" in advice
    assert "prism sample output_dir" not in advice


def test_a_folder_of_traces_is_sent_to_import_trace(tmp_path, capsys):
    traces = tmp_path / "traces"
    traces.mkdir()
    shutil.copy(EXCERPT, traces / "rank0.json")
    advice = _advice(capsys, traces)
    assert f"prism import-trace {traces}/*.json out=" in advice and "import-microbench" not in advice


def test_the_parts_of_a_killed_run_are_named_as_one_to_recover(tmp_path, capsys):
    """A prism sample killed by SIGKILL leaves only its parts (.<run>.parts/): the folder
    holds an unfinished run, which the same command recovers, not an empty store."""
    folder = tmp_path / "store"
    writer = store.RunWriter(folder, "local-cpu-killed", {"hardware": "local-cpu"})
    writer.add([{"op": "gemm", "pass": "fwd", "dtype": "float32", "m": 64, "n": 64, "k": 64, "latency_us": 9.5,
                 "repeat": r, "hardware": "local-cpu"} for r in range(3)])
    writer.flush()  # and never closed
    advice = _advice(capsys, folder)
    assert "holds an unfinished run (local-cpu-killed" in advice
    assert "run the same prism sample command again" in advice and "to recover it" in advice

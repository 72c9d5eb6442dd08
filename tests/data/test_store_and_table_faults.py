"""Probe 6, the data side: a run file copied into the store a resumed prism sample reads, and a
blank time in the nccl-tests table."""
from __future__ import annotations

import shutil

import pandas as pd
import pytest

from predictor.app.cli import main
from predictor.core.profiles import DATA_DIR, REPO_ROOT
from predictor.data.importers.microbench import import_microbench

LOCAL_RUN = next((REPO_ROOT / "samples" / "local-cpu").glob("*.parquet"))
NCCL = "comm_nccl_tests_allreduce.csv"


# -- 4. a resumed prism sample refuses a run file copied within its store ---------------------

def test_sample_resume_refuses_a_run_copied_in_the_store_naming_both(tmp_path, capsys):
    """Resuming read the store file by file, so a copy counted its repeats (and its time
    spent) twice, and tasks measured once were skipped as done."""
    pytest.importorskip("torch")
    run = shutil.copy(LOCAL_RUN, tmp_path / LOCAL_RUN.name)
    copy = shutil.copy(LOCAL_RUN, tmp_path / "run-copy.parquet")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert main(["sample", "hardware=local-cpu", "sampling=quick", "sampling.budget_s=2", "sampling.threads=1",
                 "sampling.ops=[gemm]", f"output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert str(run) in err and str(copy) in err and "both hold run" in err and "Remove one copy" in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


# -- 5. a blank nccl-tests time is not replaced by the other one silently ---------------------

@pytest.mark.parametrize("column", ["oop_time_us", "ip_time_us"])
def test_a_blank_nccl_tests_time_leaves_its_row_out_counted(tmp_path, column):
    """A blank oop_time_us was read as the row's ip_time_us (min skips NaN): a time that may
    be the first-call glitch the smaller of the two is there to avoid, and no word of it."""
    folder = tmp_path / "microbench"
    shutil.copytree(DATA_DIR / "microbench", folder)
    frame = pd.read_csv(folder / NCCL)
    frame.loc[frame.index[frame.system.str.contains("DGX H100") & (frame.nodes == 1)][0], column] = None
    frame.to_csv(folder / NCCL, index=False)
    clean = import_microbench(DATA_DIR / "microbench", "h100-sxm", tmp_path / "clean")
    damaged = import_microbench(folder, "h100-sxm", tmp_path / "damaged")
    assert damaged.left_out[f"{NCCL}: {column!r} missing or not a positive number (the smaller of oop_time_us "
                            f"and ip_time_us is the sample)"] == 1
    assert damaged.rows["all_reduce/step"] == clean.rows["all_reduce/step"] - 1
    assert sum(damaged.rows.values()) + sum(damaged.left_out.values()) == \
        sum(clean.rows.values()) + sum(clean.left_out.values())

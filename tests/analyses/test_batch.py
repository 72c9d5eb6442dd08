"""`prism predict-batch` on bad files, bad cells and interruptions (issue 16): every bad file
is one line and exit 2, every row a prediction or a status naming its column, a row reads
the same in any table, and a Ctrl-C keeps the rows written so that a rerun resumes."""
import csv
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from predictor.analyses import batch
from predictor.analyses.batch import OUTPUT_COLUMNS, PREDICTED, predict_batch, predict_table
from predictor.app.cli import main
from predictor.core.errors import PrismError
from predictor.core.profiles import DATA_DIR
from predictor.data.published import row_workload
from predictor.data.runs_table import COLUMNS, choice, count, read_table, schema_help

DRAWS = 60


@pytest.fixture
def runs(reference_data):
    """The published-runs table, every cell as text."""
    return pd.read_csv(reference_data / "e2e" / "e2e_training_visible.csv", dtype=str, keep_default_na=False)


def _write(path, table: pd.DataFrame):
    table.to_csv(path, index=False)
    return path


def _cli(capsys, table, *settings):
    code = main(["predict-batch", str(table), f"draws={DRAWS}", *map(str, settings)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _refused(capsys, *args) -> str:
    code, _, err = _cli(capsys, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    return err


def test_a_missing_empty_or_headless_file_is_one_line(tmp_path, capsys):
    out = tmp_path / "out.csv"
    assert "no such file" in _refused(capsys, tmp_path / "nope.csv", f"out={out}")
    for text in ("", "\n  \n"):
        (tmp_path / "empty.csv").write_text(text)
        assert "is empty" in _refused(capsys, tmp_path / "empty.csv", f"out={out}")
    (tmp_path / "header.csv").write_text(",".join(c.name for c in COLUMNS) + "\n")
    assert "no rows" in _refused(capsys, tmp_path / "header.csv", f"out={out}")
    assert "is a folder" in _refused(capsys, tmp_path, f"out={out}")
    assert not out.exists()


def test_an_output_named_as_another_format_is_refused(runs, tmp_path, capsys):
    src = _write(tmp_path / "in.csv", runs.head(1))
    assert "written as a CSV table; name the file .csv" in _refused(capsys, src, f"out={tmp_path / 'p.parquet'}")
    assert not (tmp_path / "p.parquet").exists()


def test_a_file_that_is_not_utf8_csv_is_one_line(runs, tmp_path, capsys):
    out = tmp_path / "out.csv"
    text = runs.head(3).assign(model="GPT 3.6B ünïcode").to_csv(index=False)
    bad = tmp_path / "bad.csv"
    bad.write_bytes(text.encode("latin-1"))
    assert "not UTF-8 (byte 0xfc on line 2)" in _refused(capsys, bad, f"out={out}")
    bad.write_bytes(text.encode("utf-16"))
    assert "UTF-16" in _refused(capsys, bad, f"out={out}")
    bad.write_bytes(b"PAR1\x00\x15\x04binary")
    assert "not text" in _refused(capsys, bad, f"out={out}")
    bad.write_text(text.replace(",", "\t"))
    assert "separated by '\\t'" in _refused(capsys, bad, f"out={out}")
    bad.write_text(text + '"an unclosed quote\n' + "x" * 140_000 + "\n")
    assert "not CSV" in _refused(capsys, bad, f"out={out}")
    good = tmp_path / "bom.csv"
    good.write_bytes(b"\xef\xbb\xbf" + text.encode())  # Excel's UTF-8 with a byte-order mark is UTF-8
    assert _cli(capsys, good, f"out={out}")[0] == 0


def test_a_missing_required_column_is_named(runs, tmp_path, capsys):
    src = _write(tmp_path / "in.csv", runs.head(3).drop(columns=["gbs", "gpu"]))
    err = _refused(capsys, src, f"out={tmp_path / 'out.csv'}")
    assert "gbs, gpu" in err and "add them" in err
    with pytest.raises(PrismError) as exc:
        read_table(src)
    assert exc.value.field == "gbs"
    # optional columns may be absent: their blanks' defaults apply
    # dims and length kept: these rows name models no registry has
    slim = runs.head(2)[[c.name for c in COLUMNS if c.required] + ["layers", "hidden", "heads", "seq_len"]]
    assert _cli(capsys, _write(tmp_path / "slim.csv", slim), f"out={tmp_path / 'slim.out.csv'}")[0] == 0


def test_the_output_is_checked_before_any_work(runs, tmp_path, capsys, monkeypatch):
    src = _write(tmp_path / "in.csv", runs.head(2))
    monkeypatch.setattr(batch.BatchPredictor, "predict", lambda *a: pytest.fail("predicted before checking out="))
    assert "does not exist" in _refused(capsys, src, f"out={tmp_path / 'no' / 'such' / 'out.csv'}")
    assert "is the input table" in _refused(capsys, src, f"out={src}")
    assert "is a folder" in _refused(capsys, src, f"out={tmp_path}")
    assert "is a file, not a folder" in _refused(capsys, src, f"out={src}/x.csv")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    assert "not this table's" in _refused(capsys, src, f"out={tmp_path / 'other.csv'}")
    assert "takes out=" in _refused(capsys, src, "out=x.csv", "drawz=3")
    assert "draws=0" in _refused(capsys, src, f"out={tmp_path / 'o.csv'}", "draws=0")


def test_an_unwritable_output_folder_is_one_line(runs, tmp_path, capsys):
    src = _write(tmp_path / "in.csv", runs.head(2))
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:  # root writes through permission bits; /proc takes no file from anyone
        folder = Path("/proc") if _writable(locked) else locked
        assert "cannot write in" in _refused(capsys, src, f"out={folder / 'out.csv'}")
    finally:
        locked.chmod(0o700)


def _writable(folder: Path) -> bool:
    try:
        (folder / ".probe").touch()
    except OSError:
        return False
    (folder / ".probe").unlink()
    return True


def test_bad_cells_fail_their_row_alone(runs, tmp_path, capsys):
    rows = runs[runs.set_id == "vtrain_multi"].head(6).copy()
    rows.iloc[0, rows.columns.get_loc("heads")] = ""          # blank: crashed the table before (int(nan))
    rows.iloc[1, rows.columns.get_loc("tp")] = "abc"
    rows.iloc[2, rows.columns.get_loc("mbs")] = "12.5"
    rows.iloc[3, rows.columns.get_loc("gpu")] = "Voodoo5"
    rows.iloc[4, rows.columns.get_loc("zero_or_distopt")] = "sharded somehow"
    src = _write(tmp_path / "in.csv", rows)
    code, stdout, _ = _cli(capsys, src, f"out={tmp_path / 'out.csv'}")
    assert code == 0 and "1 predicted, 5 with an error" in stdout
    result = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert list(result.columns) == list(rows.columns) + list(OUTPUT_COLUMNS)
    status = result.pred_status.tolist()
    assert status[0].startswith("heads: blank, and model=") and "fill in heads (attention heads)" in status[0]
    assert status[1].startswith("tp='abc': not a whole number")
    assert status[2].startswith("mbs='12.5': not a whole number")
    assert status[3].startswith("gpu='Voodoo5': no hardware profile matches")
    assert status[4].startswith("zero_or_distopt='sharded somehow': not a zero_or_distopt this reads")
    assert status[5] == "ok" and all(result.loc[5, c] for c in PREDICTED)
    assert (result.loc[:4, list(PREDICTED)] == "").all().all()  # no NaN text where nothing was predicted


def test_a_job_that_does_not_fit_is_flagged_and_the_profile_named():
    """Predicted as prism predict predicts it, but pred_fits says false; a GPU cell that is
    a variant of the profile (another memory size: Leonardo's A100 64GB) is noted as read, and
    pred_hardware names it; a cell naming two GPUs is refused."""
    job = dict(model="Llama 3 8B", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256,
               seq_len=8192, gbs=8, pp=1, num_gpus=8)
    out = predict_table(pd.DataFrame([dict(job, tp=1, dp=8, gpu="H100"), dict(job, tp=8, dp=1, gpu="H100"),
                                      dict(job, tp=8, dp=1, gpu="A100 64GB")]), draws=DRAWS)
    assert out.pred_status.tolist() == ["ok"] * 3
    assert out.pred_fits.tolist() == [False, True, True] and out.pred_mem_gib[0] > 80
    assert out.pred_hardware.tolist() == ["h100-sxm", "h100-sxm", "a100-sxm4-80gb"]
    assert "gpu 'A100 64GB' read as a100-sxm4-80gb (NVIDIA A100-SXM4-80GB, its memory 64 GiB as the name says" \
        in out.pred_assumed[2]
    assert not any(note.startswith("gpu ") for note in out.pred_assumed[0].split("; "))
    # the memory of the card named is the one checked: 51 GiB fits an 80 GB A100, not a 40 GB one (its
    # own profile) nor the 48 GiB a variant's name states
    sizes = predict_table(pd.DataFrame([dict(job, tp=4, dp=2, gpu=g) for g in ("A100 40GB", "A100 48GB", "A100")]),
                          draws=DRAWS)
    assert sizes.pred_fits.tolist() == [False, False, True] and 40 < sizes.pred_mem_gib[0] < 80
    assert sizes.pred_hardware.tolist() == ["a100-sxm4-40gb", "a100-sxm4-80gb", "a100-sxm4-80gb"]
    assert "its memory 48 GiB as the name says" in sizes.pred_assumed[1]
    # what each band rests on: the runs like it (an H100 row: the microbenchmarks tier's)
    assert all(b.startswith("runs like this (compute capability ") and "against PRISM's median" in b
               for b in out.pred_band_basis)
    assert "microbenchmarks" in out.pred_band_basis[0] and "measured samples" in out.pred_band_basis[2]
    both = predict_table(pd.DataFrame([dict(job, tp=8, dp=1, gpu="A100 or H100")]), draws=DRAWS)
    assert both.pred_status[0].startswith("gpu='A100 or H100': names more than one GPU (a100-sxm4-80gb, h100-sxm)")
    assert both.pred_band_basis[0] == ""  # no prediction, no band
    jax = predict_table(pd.DataFrame([dict(job, tp=8, dp=1, gpu="H100", framework="jax")]), draws=DRAWS)
    assert "framework 'jax' is none PRISM knows" in jax.pred_assumed[0]


def test_a_layout_error_names_the_column(runs):
    row = runs[runs.set_id == "vtrain_multi"].iloc[0].to_dict() | {"num_gpus": "63"}
    with pytest.raises(PrismError, match="^num_gpus=63: ") as exc:
        row_workload(row, {})
    assert exc.value.field == "num_gpus"


@pytest.mark.parametrize("cells, says, not_says", [
    ({"num_gpus": "63"}, "gpus=63: must equal dp·tp·pp·cp = 64·1·1·1 = 64; set num_gpus=64 or change dp",
     "parallel.dp"),
    ({"tp": "3"}, "tp=3: does not divide heads=32", "model.num_heads"),
    ({"ep": "2"}, "set ep=1", "parallel.ep"),
    ({"gbs": "7"}, "not a multiple of mbs·dp", "parallel.micro_batch_size"),
    ({"num_experts": "8", "top_k": "9"}, "top_k=9: must be 1..num_experts=8 (each token", "model."),
    ({"model": "llama-gpt"}, "model='llama-gpt': names both GPT and Llama", "ok"),  # was read as a Llama
    ({"gpu": "GB200 NVL36"}, "gpu='GB200 NVL36': an NVLink domain of 36 GPUs", "ok"),  # was priced as NVL72
    ({"gpu": "A100 PCIe"}, "gpu='A100 PCIe': a PCIe card", "ok"),  # was priced as the SXM part
    ({"gpu": "H200 NVL 141GB"}, "gpu='H200 NVL 141GB': a PCIe card", "NVLink domain of 141"),
])
def test_a_row_s_status_names_the_table_s_columns_not_prism_s_settings(runs, cells, says, not_says):
    """A status is read beside the CSV: it quotes its columns (tp=3, num_gpus=64), not the
    settings predict takes (parallel.tp=3, gpus=64)."""
    row = runs[runs.set_id == "vtrain_multi"].iloc[[0]].assign(**cells)
    status = predict_table(row, draws=DRAWS).pred_status.iloc[0]
    assert says in status and not_says not in status, status


def test_ddp_with_fsdp_zero_is_not_fsdp(runs):
    """'DDP (FSDP=0)' names FSDP only to negate it: plain data parallelism, as 'none'
    (the old reader's substring match took it for FSDP)."""
    base = runs[(runs.set_id == "torchtitan") & (runs.framework == "torchtitan (FSDP)")].iloc[-1].to_dict()
    base |= {"dp": "1024", "num_gpus": "1024", "gbs": "2048"}
    table = pd.DataFrame([base | {"zero_or_distopt": z} for z in ("DDP (FSDP=0)", "none", "FSDP2", "non-FSDP")])
    job = row_workload(table.iloc[0].to_dict(), {})
    assert job.parallel.sharding == "none"
    assert "zero_or_distopt 'DDP (FSDP=0)' read as none" in job.assumed
    pred = predict_table(table, draws=DRAWS)
    assert (pred.pred_status == "ok").all()
    p50 = pred.pred_iter_time_s_p50
    assert p50[0] == p50[1] == p50[3] and p50[2] != p50[0]


@pytest.mark.parametrize("text, value", [
    ("FSDP2 (dp column = FSDP degree)", "fsdp"), ("ZeRO-3 (DeepSpeed), no model parallelism", "zero3"),
    ("distributed optimizer (ZeRO-1-like)", "distributed_optimizer"), ("Megatron-FSDP", "fsdp"),
    ("distributed data parallel", "none"), ("no FSDP", "none"), ("FSDP=0", "none"), ("fsdp off", "none"),
    ("FSDP2 (FSDP=4)", "fsdp"), ("none", "none"), ("-", "none"), ("toml default", None), ("", None)])
def test_sharding_text_is_read_by_its_plain_meaning(text, value):
    from predictor.data.runs_table import SHARDINGS
    assert choice({"zero_or_distopt": text}, "zero_or_distopt", SHARDINGS, "none")[0] == value


@pytest.mark.parametrize("text, value", [("12", 12), ("12.0", 12), (" 8 ", 8), ("1,024", 1024), (12.0, 12),
                                         ("", None), ("nan", None), (float("nan"), None)])
def test_counts_are_read_per_cell(text, value):
    assert count({"mbs": text}, "mbs") == value


@pytest.mark.parametrize("text", ["12.5", "inf", "-3", "0", "1e9", "twelve", "0x10"])
def test_a_bad_count_names_its_column(text):
    with pytest.raises(PrismError, match="^vp=") as exc:
        count({"vp": text}, "vp")
    assert exc.value.field == "vp"


def _predicted(tmp_path, name: str, rows: list[dict]) -> dict[str, list[str]]:
    """Each row's output cells (predictions, status, assumptions) by its set_id and locator."""
    src = _write(tmp_path / f"{name}.csv", pd.DataFrame(rows))
    predict_batch(src, tmp_path / f"{name}.out.csv", draws=DRAWS)
    with open(tmp_path / f"{name}.out.csv", newline="", encoding="utf-8") as f:
        return {r["locator"]: [r[c] for c in (*PREDICTED, "pred_status", "pred_assumed")] for r in csv.DictReader(f)}


def test_a_row_reads_the_same_alone_and_in_any_table(runs, tmp_path):
    """Rows predicted one by one and in one shuffled table among garbage rows come out
    identical. vp=12 and vp=12.0 are one layout: before, a column pandas read as float (a
    blank vp elsewhere in the file) turned 12 into 12.0, which was then ignored (1F1B)."""
    picks = runs.groupby("set_id").head(2).to_dict("records")
    interleaved = runs[(runs.model == "GPT 175B") & (runs.tp == "8.0") & (runs.pp == "8.0")].iloc[0].to_dict()
    picks += [interleaved | {"vp": "12", "locator": "vp 12"}, interleaved | {"vp": "12.0", "locator": "vp 12.0"},
              interleaved | {"vp": "1", "locator": "vp 1"}]
    picks = [r | {"locator": f"{i}: {r['locator']}"} for i, r in enumerate(picks)]
    alone = {}
    for i, row in enumerate(picks):
        alone |= _predicted(tmp_path, f"alone{i}", [row])
    garbage = [picks[0] | {"heads": "", "tp": "x", "vp": "", "locator": "g1"},
               picks[1] | {"gpu": "\x7f", "vp": "yes", "mbs": "nan", "locator": "g2"}]
    mixed = _predicted(tmp_path, "mixed", garbage + picks[::-1])
    assert {k: mixed[k] for k in alone} == alone
    vp12, vp12_0, vp1 = (alone[r["locator"]] for r in picks[-3:])
    assert vp12[-2] == "ok" and vp12[:-1] == vp12_0[:-1] and vp12[0] != vp1[0]  # interleaving is not ignored


def test_ctrl_c_keeps_finished_rows_and_a_rerun_resumes(runs, tmp_path, monkeypatch):
    rows = runs[runs.set_id == "vtrain_multi"].head(7)
    src = _write(tmp_path / "in.csv", rows)
    whole = tmp_path / "whole.csv"
    predict_batch(src, whole, draws=DRAWS, chunk_rows=2)

    calls = []
    real = batch.BatchPredictor.predict

    def interrupted_at_the_third_chunk(self, chunk):
        calls.append(len(chunk))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, chunk)

    out = tmp_path / "out.csv"
    monkeypatch.setattr(batch.BatchPredictor, "predict", interrupted_at_the_third_chunk)
    report = predict_batch(src, out, draws=DRAWS, chunk_rows=2)
    assert report.status == "interrupted" and report.written == 4
    assert len(pd.read_csv(out)) == 4  # two whole chunks kept
    monkeypatch.setattr(batch.BatchPredictor, "predict", real)
    report = predict_batch(src, out, draws=DRAWS, chunk_rows=2)
    assert (report.status, report.resumed, report.rows) == ("done", 4, 7)
    assert out.read_bytes() == whole.read_bytes()
    # a torn last line (killed mid-write) and a row edited since are predicted again
    lines = whole.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:5]) + lines[5][:20])
    edited = rows.copy()
    edited.iloc[0, edited.columns.get_loc("notes")] = "edited"
    _write(src, edited)
    report = predict_batch(src, out, draws=DRAWS, chunk_rows=2)
    assert report.resumed == 3 and len(pd.read_csv(out)) == 7
    assert pd.read_csv(out).notes[0] == "edited"  # in the input's order
    # other settings are other predictions: refused, not written over
    before = out.read_bytes()
    with pytest.raises(PrismError, match=f"out={out}: holds 7 row\\(s\\) of this table predicted with other settings"):
        predict_batch(src, out, draws=DRAWS + 1)
    assert out.read_bytes() == before


def test_a_second_run_into_the_same_output_is_refused_while_the_first_writes(runs, tmp_path, capsys):
    src = _write(tmp_path / "in.csv", runs[runs.set_id == "vtrain_multi"].head(2))
    out = tmp_path / "out.csv"
    lock = tmp_path / ".out.csv.lock"
    lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": "now"}))
    err = _refused(capsys, src, f"out={out}")
    assert "out=" in err and "another prism predict-batch is writing it" in err and str(lock) in err
    assert not out.exists()  # the first writer's file is left alone
    # a lock whose writer is gone from this host is taken over, and released at the end
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    lock.write_text(json.dumps({"pid": gone.pid, "host": socket.gethostname(), "started": "then"}))
    assert predict_batch(src, out, draws=DRAWS).written == 2
    assert not lock.exists() and len(pd.read_csv(out)) == 2


def test_the_command_line_says_interrupted_and_exits_130(runs, tmp_path, capsys, monkeypatch):
    src = _write(tmp_path / "in.csv", runs[runs.set_id == "vtrain_multi"].head(2))
    monkeypatch.setattr(batch.BatchPredictor, "predict", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
    code, stdout, _ = _cli(capsys, src, f"out={tmp_path / 'out.csv'}")
    assert code == 130 and "run the same command again" in stdout


def test_the_report_and_json(runs, tmp_path, capsys):
    import json
    src = _write(tmp_path / "in.csv", runs.head(3))
    code, stdout, err = _cli(capsys, src, f"out={tmp_path / 'out.csv'}", "--json")
    report = json.loads(stdout)
    assert code == 0 and report["rows"] == 3 and report["predicted"] == 3 and "set_id" in report["unread_columns"]
    assert err == ""  # no progress bar under --json


def test_help_prints_the_schema(capsys):
    with pytest.raises(SystemExit):
        main(["predict-batch", "--help"])
    text = capsys.readouterr().out
    assert schema_help() in text
    for c in COLUMNS:
        assert f"  {c.name}" in text


def test_a_table_of_which_no_row_is_predicted_exits_with_an_error(runs, tmp_path, capsys):
    src = _write(tmp_path / "all-bad.csv", runs.head(2).assign(gpu="no such accelerator"))
    code, _, err = _cli(capsys, src, f"out={tmp_path / 'out.csv'}")
    assert code == 2 and "none of the 2 rows was predicted" in err
    written = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert len(written) == 2 and (written.pred_status != "ok").all()  # each row's reason is kept


def test_blank_expert_cells_say_what_they_were_read_as():
    """A known model's blank MoE cells came from conf/model, an unknown one's became the dense
    FFN width on every layer (721.7 GiB against 169): pred_assumed said neither."""
    from predictor.data.published import row_model
    rows = pd.read_csv(DATA_DIR / "e2e" / "e2e_moe_blackwell_visible.csv")
    known = rows.iloc[2].to_dict() | dict.fromkeys(["expert_ffn", "moe_layer_freq"])
    notes = []
    row_model(known, notes)
    assert "expert_ffn=2048, moe_layer_freq=1 (blank: from conf/model (deepseek-v3))" in notes
    notes = []
    row_model(known | {"model": "Llama-MoE-custom"}, notes)
    assert "expert_ffn=18432 (blank: the dense FFN width), moe_layer_freq=1 (blank: every layer)" in notes


def test_a_pool_of_workers_predicts_every_row_as_one_process_does(runs, tmp_path):
    src = _write(tmp_path / "in.csv", runs.head(batch.POOL_ROWS))
    one = predict_batch(src, tmp_path / "one.csv", draws=DRAWS, workers=1)
    two = predict_batch(src, tmp_path / "two.csv", draws=DRAWS, workers=2)
    assert (tmp_path / "one.csv").read_bytes() == (tmp_path / "two.csv").read_bytes()
    assert (one.rows, one.predicted, one.distinct_jobs) == (two.rows, two.predicted, two.distinct_jobs)


@pytest.mark.slow
def test_ctrl_c_under_a_pool_keeps_each_written_row_once_and_the_rerun_finishes(runs, tmp_path):
    import signal
    import time
    gbs = pd.to_numeric(runs.gbs, errors="coerce")
    table = pd.concat([runs.assign(gbs=(gbs * k).astype("Int64").astype(str).replace("<NA>", "")) for k in range(1, 9)],
                      ignore_index=True)
    src, out = _write(tmp_path / "in.csv", table), tmp_path / "out.csv"
    run = subprocess.Popen([sys.executable, "-m", "predictor.app.cli", "predict-batch", str(src), f"out={out}",
                            "workers=2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not out.exists() and run.poll() is None:
        time.sleep(0.2)
    time.sleep(2)
    run.send_signal(signal.SIGINT)
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode in (0, 130) and "Traceback" not in stderr
    kept = pd.read_csv(out)
    assert kept.pred_key.is_unique
    done = subprocess.run([sys.executable, "-m", "predictor.app.cli", "predict-batch", str(src), f"out={out}"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    final = pd.read_csv(out)
    assert len(final) == len(table) and final.pred_key.is_unique

import hashlib
import json
import os
import socket
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from predictor.core.errors import PrismError
from predictor.data import store


def _rows(n, op="gemm", start=0):
    now = datetime.now(timezone.utc)
    return [dict(op=op, **{"pass": "fwd"}, dtype="float32", m=64, n=64, k=64 + start,
                 latency_us=10.0 + r, repeat=r, hardware="local-cpu", run_id="r", timestamp=now,
                 origin="sampled") for r in range(n)]


def _md5(path):
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_parts_join_into_one_file_with_metadata(tmp_path):
    w = store.RunWriter(tmp_path, "run-a", {"plan_id": "p1"})
    w.add(_rows(10))
    w.flush()
    w.add(_rows(10, start=1))
    path = w.close()
    assert path == tmp_path / "run-a.parquet"
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())
    df = store.read_samples(tmp_path)
    assert len(df) == 20 and list(df.columns) == list(store.COLUMNS)
    assert store.read_run_metadata(path) == {"plan_id": "p1"}


def test_a_killed_run_is_recovered_from_its_parts(tmp_path):
    w = store.RunWriter(tmp_path, "run-k", {"plan_id": "p1"})
    w.add(_rows(10))
    w.flush()
    w.add(_rows(5, start=1))  # never flushed: lost with the process
    del w
    assert store.run_files(tmp_path) == []
    [path] = store.recover_unfinished(tmp_path)
    assert len(store.read_samples(path)) == 10


def test_finished_runs_are_never_overwritten(tmp_path):
    for _ in range(2):
        w = store.RunWriter(tmp_path, "same-id", {})
        w.add(_rows(3))
        if _ == 0:
            first = w.close()
            digest = _md5(first)
    with pytest.raises(PrismError, match="never reused"):
        w.close()
    assert _md5(first) == digest


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_unreadable_files_give_one_clear_error_and_stay_intact(tmp_path, damage):
    w = store.RunWriter(tmp_path, "good", {})
    w.add(_rows(10))
    good = w.close()
    bad = tmp_path / "bad.parquet"
    data = good.read_bytes()
    bad.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"not parquet at all")
    before = _md5(bad), _md5(good)
    with pytest.raises(PrismError, match="bad.parquet: not a readable Parquet file .* truncated or corrupt"):
        store.read_samples(tmp_path)
    assert (_md5(bad), _md5(good)) == before


def test_a_table_given_as_the_store_is_named_as_such(tmp_path):
    table = tmp_path / "runs.csv"
    table.write_text("op,latency_us\ngemm,1\n")
    with pytest.raises(PrismError, match="runs.csv: a .csv, not a sample store"):
        store.read_samples(table)


def test_the_summary_counts_rows_train_would_refuse(tmp_path):
    from predictor.data.summary import summarize
    rows = [dict(row, latency_us=-1.0) if i < 3 else row for i, row in enumerate(_rows(10))]
    w = store.RunWriter(tmp_path, "neg", {})
    w.add(rows)
    w.close()
    assert summarize(tmp_path).unusable_rows.sum() == 3


def test_files_missing_required_columns_or_with_unknown_ops_are_rejected(tmp_path):
    import pandas as pd
    pd.DataFrame({"op": ["gemm"], "latency_us": [1.0]}).to_parquet(tmp_path / "x.parquet")
    with pytest.raises(PrismError, match="missing column.*pass"):
        store.read_samples(tmp_path)
    w = store.RunWriter(tmp_path / "s", "r", {})
    w.add(_rows(1, op="convolution"))
    w.close()
    with pytest.raises(PrismError, match="unknown op 'convolution'"):
        store.read_samples(tmp_path / "s")


def test_one_writer_per_store(tmp_path):
    with store.writer_lock(tmp_path) as note:
        assert note is None
        with pytest.raises(PrismError) as err:
            with store.writer_lock(tmp_path):
                pass
        message = str(err.value)
        assert err.value.field == "output_dir" and str(tmp_path) in message
        assert f"pid {os.getpid()} on host {socket.gethostname()}" in message
        assert "another output_dir" in message and str(tmp_path / ".writer.lock") in message
    assert not (tmp_path / ".writer.lock").exists()  # released: the next run may write
    with store.writer_lock(tmp_path):
        assert (tmp_path / ".writer.lock").exists()


def test_the_lock_of_a_dead_writer_on_this_host_is_taken_over_with_a_note(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    lock = tmp_path / ".writer.lock"
    lock.write_text(json.dumps({"pid": gone.pid, "host": socket.gethostname(), "started": "2025-01-01T00:00:00"}))
    with store.writer_lock(tmp_path) as note:
        assert f"took over the writer lock of pid {gone.pid}" in note
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert not lock.exists()
    # a writer on another host cannot be checked from here: its lock stands
    lock.write_text(json.dumps({"pid": gone.pid, "host": "elsewhere", "started": "2025-01-01T00:00:00"}))
    with pytest.raises(PrismError, match="on host elsewhere.*delete"):
        with store.writer_lock(tmp_path):
            pass
    assert lock.exists()


def test_rank_parts_join_into_one_run_naming_every_rank(tmp_path):
    owner = store.RunWriter(tmp_path, "cluster-run", {"plan_id": "p"}, prefix="rank00000")
    others = [store.RunWriter(tmp_path, "cluster-run", {}, prefix=f"rank{r:05d}", owner=False) for r in (1, 2)]
    for r, w in enumerate([owner, *others]):
        w.add([dict(row, rank=r) for row in _rows(4, start=r)])
        w.flush()
        store.mark_rank(w.parts_dir, r, {"host": "h", "node": r // 2, "status": "end-of-plan", "rows": 4})
    assert set(store.rank_records(owner.parts_dir)) == {0, 1, 2}
    path = owner.close()
    df = store.read_samples(path)
    assert sorted(df.groupby("rank").size().items()) == [(0, 4), (1, 4), (2, 4)]
    meta = store.read_run_metadata(path)
    assert meta["plan_id"] == "p" and [r["rank"] for r in meta["ranks"]] == [0, 1, 2]


def test_a_rank_writes_only_into_an_open_run_and_never_after_its_join(tmp_path):
    with pytest.raises(PrismError, match="no open parts folder") as err:
        store.RunWriter(tmp_path, "not-opened", {}, prefix="rank00001", owner=False)
    assert err.value.field == "output_dir"
    owner = store.RunWriter(tmp_path, "run-j", {}, prefix="rank00000")
    late = store.RunWriter(tmp_path, "run-j", {}, prefix="rank00001", owner=False)
    owner.add(_rows(2))
    path = owner.close()  # joined while rank 1 was silent (reported lost)
    late.add(_rows(3, start=5))
    with pytest.raises(PrismError, match="closed without this writer's last 3 row"):
        late.flush()
    assert len(store.read_samples(path)) == 2 and store.run_files(tmp_path) == [path]


def test_a_killed_cluster_run_is_recovered_with_every_rank_s_parts(tmp_path):
    owner = store.RunWriter(tmp_path, "run-c", {"plan_id": "p"}, prefix="rank00000")
    other = store.RunWriter(tmp_path, "run-c", {}, prefix="rank00001", owner=False)
    owner.add(_rows(3))
    other.add(_rows(5, start=1))
    owner.flush()
    other.flush()
    store.mark_rank(other.parts_dir, 1, {"host": "h", "node": 0, "status": "running", "rows": 5})
    del owner, other  # every process of the job killed
    [path] = store.recover_unfinished(tmp_path)
    assert len(store.read_samples(path)) == 8
    assert store.read_run_metadata(path)["ranks"][0]["status"] == "running"

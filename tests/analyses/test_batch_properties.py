"""`prism predict-batch` on random tables (issue 16): garbage cells, missing columns, other
encodings and binary files never produce a traceback, only one line and exit 2, or a
table in which every row has a prediction or a status, and no prediction is NaN or inf."""
import contextlib
import csv
import io
import math
import tempfile
from pathlib import Path

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictor.analyses.batch import OUTPUT_COLUMNS, PREDICTED
from predictor.app.cli import main
from predictor.core.profiles import DATA_DIR

RUNS = pd.read_csv(DATA_DIR / "e2e" / "e2e_training_visible.csv", dtype=str, keep_default_na=False)
#: a few real rows of every kind: Megatron-LM on A100, torchtitan and Megatron-Core on H100, HF Accelerate
BASE = RUNS.groupby("set_id").head(1).reset_index(drop=True)
NUMBERS = st.one_of(
    st.integers(-10**30, 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["0", "-1", "1e-300", "1e300", "12.5", "12.0", "1,024", "inf", "-inf", "nan", "NaN", "NA",
                     " 8 ", "0x10", "８", "1_000"]))
GARBAGE = st.one_of(NUMBERS, st.text(max_size=16),
                    st.sampled_from(["", "none", "yes", "DDP (FSDP=0)", "fp8", "FSDP=0", "toml default",
                                     "H100", "A100 80GB", "\x7f", '"', "a,b", "Llama 3", "per node 0 Gb/s"]))


@st.composite
def tables(draw):
    """(file bytes, data rows written): real rows with garbage cells, columns dropped, in
    one of several encodings, or plain random bytes."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=300)), None
    table = BASE.iloc[draw(st.lists(st.integers(0, len(BASE) - 1), min_size=1, max_size=4))].copy()
    for _ in range(draw(st.integers(0, 6))):
        row, column = draw(st.integers(0, len(table) - 1)), draw(st.sampled_from(list(table.columns)))
        table.iloc[row, table.columns.get_loc(column)] = draw(GARBAGE)
    table = table.drop(columns=draw(st.sets(st.sampled_from(list(table.columns)), max_size=2)))
    text = table.to_csv(index=False)
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-8-sig", "latin-1", "utf-16"]))
    rows = sum(1 for cells in csv.reader(io.StringIO(text, newline="")) if cells) - 1  # a bare CR ends a row too
    return text.encode(encoding, errors="replace"), rows


def _run(data: bytes, folder: Path) -> tuple[int, str, Path]:
    src, out = folder / "in.csv", folder / "out.csv"
    src.write_bytes(data)
    stderr = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
        code = main(["predict-batch", str(src), f"out={out}", "draws=20"])
    return code, stderr.getvalue(), out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_no_table_gives_a_traceback_or_a_nan(case):
    data, rows = case
    with tempfile.TemporaryDirectory() as tmp:
        code, err, out = _run(data, Path(tmp))
        if code == 2:
            assert len(err.strip().splitlines()) == 1 and err.startswith("prism predict-batch: error: "), err
            return
        assert code == 0, err
        with open(out, newline="", encoding="utf-8") as f:
            written = list(csv.DictReader(f))
    if rows is not None:
        assert len(written) == rows
    for row in written:
        assert row["pred_status"], row
        values = [row[c] for c in PREDICTED]
        if row["pred_status"] == "ok":
            assert all(math.isfinite(float(v)) and float(v) > 0 for v in values), row
        else:
            assert values == [""] * len(PREDICTED), row
        assert set(OUTPUT_COLUMNS) <= set(row)

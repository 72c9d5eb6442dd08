"""Bad data files: a damaged measurement file, a sample store with text in its numbers or an
unknown pass, and a microbenchmark table cut mid-quote. Each is one error naming the file and
the field."""

import numpy as np
import pytest

from predictor.core.errors import PrismError
from predictor.core.profiles import REPO_ROOT
from predictor.data.measurements import layout_configs, read_measurements


def test_a_damaged_measure_file_names_the_layout(tmp_path):
    frame = read_measurements(REPO_ROOT / "measurements" / "local-cpu-suite-C.parquet")
    layout = frame.layout_id.iloc[0]
    frame.loc[frame.layout_id == layout, "parallel_json"] = "{dp: 1"
    frame.to_parquet(tmp_path / "m.parquet")
    with pytest.raises(PrismError, match="parallel_json of layout"):
        layout_configs(read_measurements(tmp_path / "m.parquet"), layout)
    frame.to_csv(tmp_path / "m.csv")
    with pytest.raises(PrismError, match="published="):
        read_measurements(tmp_path / "m.csv")


def test_a_sample_store_with_text_in_numbers_or_an_unknown_pass_is_refused(tmp_path):
    from predictor.data import store
    rows = store.read_samples(REPO_ROOT / "samples" / "local-cpu").head(20).copy()
    bad = rows.astype({"latency_us": str})
    bad.loc[bad.index[0], "latency_us"] = "fast"
    bad.to_parquet(tmp_path / "text.parquet")
    with pytest.raises(PrismError, match="column 'latency_us' holds text"):
        store.read_samples(tmp_path / "text.parquet")
    as_text = rows.astype({"latency_us": str})
    as_text.to_parquet(tmp_path / "numbers.parquet")
    assert store.read_samples(tmp_path / "numbers.parquet").latency_us.dtype.kind == "f"  # read as numbers
    sideways = rows.assign(**{"pass": "sideways"})
    sideways.to_parquet(tmp_path / "pass.parquet")
    with pytest.raises(PrismError, match="column 'pass'"):
        store.read_samples(tmp_path / "pass.parquet")
    # `prism samples` raised KeyError: 'm', and so did a resumed `prism sample`
    gemm = store.read_samples(REPO_ROOT / "samples" / "local-cpu", ops=["gemm"]).head(20)
    gemm.drop(columns=["m"]).to_parquet(tmp_path / "no_m.parquet")
    with pytest.raises(PrismError, match="column 'm': missing, and every gemm row needs its shape"):
        store.read_samples(tmp_path / "no_m.parquet")
    gemm.assign(m=np.where(np.arange(len(gemm)) == 0, np.nan, gemm.m)).to_parquet(tmp_path / "blank_m.parquet")
    with pytest.raises(PrismError, match="column 'm': empty in some rows"):
        store.read_samples(tmp_path / "blank_m.parquet")
    (tmp_path / "empty").mkdir()  # was: 'holds no sample runs (.parquet)'
    gemm.head(0).to_parquet(tmp_path / "empty" / "run.parquet")
    assert store.no_runs(tmp_path / "empty").endswith("holds 1 sample run(s) with no rows (run.parquet); sample "
                                                      f"again: prism sample output_dir={tmp_path / 'empty'}")


def test_a_microbench_table_cut_mid_quote_is_named(tmp_path):
    import shutil

    from predictor.data.importers.microbench import import_microbench
    folder = tmp_path / "microbench"
    shutil.copytree(REPO_ROOT / "data" / "microbench", folder)
    table = folder / "op_gemm_xla_perf_table.csv"
    table.write_text(table.read_text().splitlines()[0] + '\nrow,"cut mid quote\n')
    with pytest.raises(PrismError, match="op_gemm_xla_perf_table.csv: not a readable CSV .*restore it"):
        import_microbench(folder, "h100-sxm", tmp_path / "out")
    with pytest.raises(PrismError, match="a file; give the folder"):
        import_microbench(table, "h100-sxm", tmp_path / "out")

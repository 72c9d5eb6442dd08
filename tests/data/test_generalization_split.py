"""The generalization protocol's split (data/e2e/split.yaml): every source of data/e2e on
exactly one side, every MLPerf set scored, and every visible row read once."""
import pytest

from predictor.core.errors import PrismError
from predictor.data.split import SPLIT_FILE, e2e_sources, load_split, visible_runs


def test_the_split_covers_every_source_exactly_once():
    side_of = load_split()
    sources = e2e_sources()
    assert set(side_of) == set(sources), (f"not placed: {sorted(set(sources) - set(side_of))}; "
                                          f"placed but in no table: {sorted(set(side_of) - set(sources))}")
    assert set(side_of.values()) == {"fit", "score"}


def test_mlperf_is_scored():
    side_of = load_split()
    mlperf = [s for s in side_of if s.startswith("mlperf")]
    assert len(mlperf) == 4 and all(side_of[s] == "score" for s in mlperf)


def test_a_source_on_both_sides_is_refused(tmp_path):
    path = tmp_path / "split.yaml"
    path.write_text("fit:\n  a: x\nscore:\n  a: y\n")
    with pytest.raises(PrismError, match="both sides"):
        load_split(path)
    path.write_text("fit:\n  a: x\nkept:\n  b: y\n")
    with pytest.raises(PrismError, match="no side"):
        load_split(path)


def test_the_visible_runs_hold_each_source_once():
    runs = visible_runs()
    assert set(runs.source) == set(load_split())
    per_table = runs.groupby("source").table.nunique()
    assert (per_table == 1).all()  # e2e_training_visible.csv's sets are not read again from their own files
    assert len(runs) == 1933 and runs.measured_s.notna().sum() >= 1900


def test_the_split_file_says_its_rule_and_date():
    text = SPLIT_FILE.read_text()
    assert "decided: 2026-11-28" in text and "Rule:" in text

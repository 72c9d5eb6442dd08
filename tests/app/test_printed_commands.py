"""A fifth new user's probe (2026-11-27): the command lines PRISM prints and reads back."""
import shlex

from hydra.core.override_parser.overrides_parser import OverridesParser

from predictor.app.cli import main
from predictor.app.config import shell_setting
from predictor.core.profiles import DATA_DIR


def test_a_printed_setting_reads_back_as_the_folder_it_names():
    for folder in ("/tmp/models", "/tmp/mo ü", "/tmp/it's here", "/tmp/$HOME x"):
        [word] = shlex.split(shell_setting("models_dir", folder))  # the shell's reading of the printed line
        assert OverridesParser.create().parse_override(word).value() == folder


def test_an_importer_reads_out_quoted_as_the_hydra_verbs_ask(tmp_path, monkeypatch, capsys):
    """out='...' had made a folder named ' in the current one and written the run there."""
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "my store ü"
    assert main(["import-ett", str(DATA_DIR / "ett" / "Vista"), f"out='{store}'"]) == 0
    assert list(store.glob("*.parquet")) and [p.name for p in tmp_path.iterdir()] == [store.name]

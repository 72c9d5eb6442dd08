"""The one grammar of the command line (predictor.app.grammar): paths, key=value settings,
lists in brackets and flags, read the same way for every verb."""
import pytest

from predictor.app.grammar import Paths, flags_first, listed, read, split_setting
from predictor.core.errors import PrismError


def test_a_verb_without_paths_reads_every_word_as_a_setting():
    command, wrong = read("predict", ["model=tiny", "sampling.ops=[gemm,attention]", "~seed"], None)
    assert wrong is None and command.paths == [] and command.settings == [
        "model=tiny", "sampling.ops=[gemm,attention]", "~seed"]


def test_a_verb_with_paths_tells_them_from_settings(tmp_path):
    there = tmp_path / "runs=1.csv"
    there.write_text("x\n")
    words = ["a.json", "out=samples/x", str(there), "b.json", "hardware=local-cpu"]
    command, wrong = read("import-trace", words, Paths("FILE", many=True))
    assert wrong is None and command.paths == ["a.json", str(there), "b.json"]  # a file with "=" that is there
    assert command.settings == ["out=samples/x", "hardware=local-cpu"]


@pytest.mark.parametrize("words, wrong", [
    ([], "the following arguments are required: path"),
    (["out=x.csv"], "the following arguments are required: path"),
    (["a.csv", "b.csv"], "unrecognized arguments: b.csv"),
    (["a.csv", "out=x.csv"], None),
])
def test_the_number_of_paths_is_said_as_argparse_says_it(words, wrong):
    assert read("predict-batch", words, Paths())[1] == wrong


def test_files_given_as_settings_alone_are_the_verb_s_to_refuse():
    assert read("import-trace", [], Paths("FILE", many=True))[1] == "the following arguments are required: FILE"
    assert read("import-trace", ["out=x"], Paths("FILE", many=True))[1] is None


def test_a_setting_naming_the_path_is_refused_with_the_bare_form():
    with pytest.raises(PrismError, match="prism samples takes the folder itself: prism samples samples/cpu"):
        read("samples", ["samples=samples/cpu"], Paths(key="samples"))


def test_flags_may_stand_anywhere():
    assert flags_first(["predict", "model=x", "--json", "gpus=8"]) == ["predict", "--json", "model=x", "gpus=8"]


def test_json_is_output_json():
    command, _ = read("predict", ["model=x"], None, json=True)
    assert command.wants_json
    assert read("predict", ["output=json"], None)[0].wants_json


def test_values_and_lists():
    assert split_setting("out='my runs'") == ("out", "my runs") and split_setting("plain") == ("", "")
    assert listed("hardware", "[a, b,a]") == ["a", "b", "a"] and listed("hardware", "a,b") == ["a", "b"]
    with pytest.raises(PrismError, match=r"hardware=\[a,b: an unclosed bracket; write hardware=\[a,b\]"):
        listed("hardware", "[a,b")

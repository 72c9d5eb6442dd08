"""The verbs, each declared once (predictor.app.verbs): its help teaches with examples, its
settings node refuses what it does not read, and a new verb needs one declaration."""
import pytest

from predictor.app import verbs as registry
from predictor.app.cli import VERBS, main
from predictor.app.settings import Config, Plain
from predictor.app.verbs import build_parser, verb

#: Every verb of prism today, in the order prism --help lists them.
ALL = ["sample", "train", "evaluate", "predict", "variability", "compare", "search", "predict-batch", "measure",
       "validate", "calibrate", "samples", "import-microbench", "import-trace", "import-ett"]


def test_every_verb_is_declared_in_the_order_help_lists_them():
    assert list(VERBS) == ALL
    assert VERBS["predict"]["examples"] == VERBS["predict"].examples  # read as the dicts they were


@pytest.mark.parametrize("name", ALL)
def test_every_help_teaches_with_examples(name, capsys):
    with pytest.raises(SystemExit) as done:
        main([name, "--help"])
    text = capsys.readouterr().out
    assert done.value.code == 0 and "examples:" in text
    assert all(example in text for example in VERBS[name].examples)
    assert ("--show-config" in text) == isinstance(VERBS[name].reads, Config)


def test_a_setting_another_verb_reads_is_refused_naming_its_readers(capsys):
    assert main(["search", "model=tiny", "gpus=8", "pue=1.2"]) == 2
    assert "pue=1.2: prism search does not read pue (prism compare reads it); drop it" in capsys.readouterr().err


def test_a_plain_verb_refuses_a_key_it_does_not_take(capsys):
    assert main(["import-ett", "data/ett/Perlmutter", "out=x", "draws=3"]) == 2
    assert "'draws=3': import-ett takes out=DIR (required) and output=json|table" in capsys.readouterr().err


def test_one_declaration_adds_a_verb(capsys, monkeypatch):
    monkeypatch.setattr(registry, "VERBS", dict(registry.VERBS))

    @verb("hello", help="say hello", description="Say hello to name=NAME.", examples=["prism hello name=you"],
          reads=Plain({"name": "world"}, "name=NAME"))
    def _hello(command) -> int:
        from predictor.app.settings import read_plain
        print(f"hello {read_plain(command)['name']}")
        return 0

    monkeypatch.setattr("predictor.app.cli.VERBS", registry.VERBS)
    assert main(["hello", "name=you"]) == 0 and capsys.readouterr().out == "hello you\n"
    assert main(["hello", "nme=you"]) == 2 and "'nme=you': hello takes name=NAME" in capsys.readouterr().err
    assert "hello" in build_parser().format_help()

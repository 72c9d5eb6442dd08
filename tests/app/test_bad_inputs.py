"""Bad command lines, one parametrised test per verb over the table in tests/app/bad_inputs.py:
each row's exit code, and one line on stderr that starts ``prism VERB: error:`` and holds the
row's fragment, never a traceback."""
import pytest
from bad_inputs import VERBS, of_verb  # tests/app/bad_inputs.py: pytest puts this folder on sys.path

from predictor.app.cli import main


def _ids(rows) -> list[str]:
    return [" ".join(argv[1:]) for argv, _, _ in rows]


def _refused(argv, code, says, capsys) -> None:
    assert main(list(argv)) == code
    err = capsys.readouterr().err
    assert err.startswith(f"prism {argv[0]}: error:") and says in err, err
    assert err.count("\n") == 1 and "Traceback" not in err, err


@pytest.mark.parametrize("argv, code, says", of_verb("predict"), ids=_ids(of_verb("predict")))
def test_predict(argv, code, says, capsys):
    _refused(argv, code, says, capsys)


@pytest.mark.parametrize("argv, code, says", of_verb("search"), ids=_ids(of_verb("search")))
def test_search(argv, code, says, capsys):
    _refused(argv, code, says, capsys)


@pytest.mark.parametrize("argv, code, says", of_verb("compare"), ids=_ids(of_verb("compare")))
def test_compare(argv, code, says, capsys):
    _refused(argv, code, says, capsys)


@pytest.mark.parametrize("argv, code, says", of_verb("variability"), ids=_ids(of_verb("variability")))
def test_variability(argv, code, says, capsys):
    _refused(argv, code, says, capsys)


@pytest.mark.parametrize("argv, code, says", of_verb("validate"), ids=_ids(of_verb("validate")))
def test_validate(argv, code, says, capsys):
    _refused(argv, code, says, capsys)


@pytest.mark.parametrize("argv, code, says", of_verb("evaluate"), ids=_ids(of_verb("evaluate")))
def test_evaluate(argv, code, says, capsys):
    _refused(argv, code, says, capsys)


@pytest.mark.parametrize("argv, code, says", of_verb("train"), ids=_ids(of_verb("train")))
def test_train(argv, code, says, capsys):
    _refused(argv, code, says, capsys)


@pytest.mark.parametrize("argv, code, says", of_verb("sample"), ids=_ids(of_verb("sample")))
def test_sample(argv, code, says, capsys):
    _refused(argv, code, says, capsys)



# a verb with rows in the table and no test above would leave its rows unrun
assert sorted(name[len("test_"):] for name in dir() if name.startswith("test_")) == VERBS, \
    "give each verb of tests/app/bad_inputs.py its test here"

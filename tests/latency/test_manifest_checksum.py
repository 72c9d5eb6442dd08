"""A hand-edited manifest (issue 55): an entry removed, conformal offsets inverted, and the
set was trusted (the op fell back to a prior while the evidence still said "measured
samples"). A manifest carries its own checksum, written at save and checked at load; a
changed one is refused with one line naming the file and the fix."""
import json
import shutil

import pytest

from predictor.app.cli import main
from predictor.core.errors import PrismError
from predictor.core.files import MANIFEST
from predictor.latency.artifacts import (
    CHECKSUM_KEY,
    ModelSet,
    manifest_checksum,
    models_dir,
    unsigned_note,
    unsigned_text,
)


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "models"
    shutil.copytree(models_dir() / "local-cpu", root / "local-cpu")
    return root


def _edit(root, change):
    path = root / "local-cpu" / MANIFEST
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest, indent=1))
    return path


def test_every_shipped_manifest_carries_its_checksum():
    for path in models_dir().glob(f"*/{MANIFEST}"):
        if path.parent.name == "doubt":  # the doubt model's own manifest (predictor.latency.doubt)
            continue
        manifest = json.loads(path.read_text())
        assert manifest[CHECKSUM_KEY] == manifest_checksum(manifest), path
        assert CHECKSUM_KEY not in unsigned_text(path.read_text())


def _removed(manifest):
    manifest["models"].pop(sorted(manifest["models"])[0])


def _inverted(manifest):
    entry = next(iter(manifest["models"].values()))
    entry["offsets"] = [-v for v in entry["offsets"]][::-1]


@pytest.mark.parametrize("change", [_removed, _inverted], ids=["entry removed", "offsets inverted"])
def test_a_changed_manifest_is_refused_naming_the_file_and_the_fix(root, change, capsys):
    path = _edit(root, change)
    with pytest.raises(PrismError, match="changed since prism train wrote it"):
        ModelSet.load(root / "local-cpu", "local-cpu")
    assert main(["predict", "model=tiny", "hardware=local-cpu", f"models_dir={root}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and "prism train" in err, err


def test_a_manifest_without_a_checksum_is_read_with_a_note(root):
    _edit(root, lambda m: m.pop(CHECKSUM_KEY))
    models = ModelSet.load(root / "local-cpu", "local-cpu")
    assert "carries no checksum" in unsigned_note(models)
    assert unsigned_note(ModelSet.load(models_dir() / "local-cpu", "local-cpu")) is None

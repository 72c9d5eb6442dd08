"""The import rules of docs/architecture.md ("Layers"): predictor never imports torch or sampling, each layer
of predictor imports only the layers below it, and every layer below the app imports
without Hydra.

The first two are import-linter contracts in pyproject.toml (``[tool.importlinter]``:
``lint-imports`` reads every import statement, function-level ones too, and its
``exhaustive`` option refuses a subpackage of predictor that is in no layer); the
torch test also imports every module, which catches what a dependency pulls in."""
import pkgutil
import subprocess
import sys
from pathlib import Path

from importlinter.cli import lint_imports

import predictor

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(predictor.__path__, "predictor."))


def test_import_contracts_hold(capsys):
    status = lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    assert status == 0, capsys.readouterr().out[-4000:]


def test_predictor_imports_neither_torch_nor_sampling():
    modules = _modules()
    code = ("import sys, importlib\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'sampling'))\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"predictor pulled in: {out.stdout.strip()}"
    assert "predictor.app.cli" in modules and "predictor.data.store" in modules


def test_layers_below_the_app_import_without_hydra():
    below_app = [m for m in _modules() if m.split(".")[1] != "app"]
    code = ("import sys, importlib, importlib.abc\n"
            "class NoHydra(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'hydra':\n"
            "            raise ImportError('hydra is blocked in this test')\n"
            "sys.meta_path.insert(0, NoHydra())\n"
            f"for m in {below_app!r}: importlib.import_module(m)\n"
            "print(len(sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(below_app) > 20

"""predictor must import without torch and without the sampling package (DESIGN.md)."""
import pkgutil
import subprocess
import sys

import predictor


def test_predictor_imports_neither_torch_nor_sampling():
    modules = [f"predictor.{m.name}" for m in pkgutil.iter_modules(predictor.__path__)]
    code = ("import sys, importlib\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'sampling'))\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"predictor pulled in: {out.stdout.strip()}"
    assert "predictor.cli" in modules and "predictor.store" in modules

"""The import rules of DESIGN.md: predictor never imports torch or sampling, each layer
of predictor imports only the layers below it, and every layer below the app imports
without Hydra."""
import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import predictor

#: predictor's layers, lowest first (README, "Architecture").
LAYERS = ("core", "workload", "latency", "data", "engine", "analyses", "app")
PACKAGE = Path(predictor.__file__).parent


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(predictor.__path__, "predictor."))


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def _imports(path: Path) -> set[str]:
    """Every predictor module ``path`` imports, at any depth (function-level imports too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m.startswith("predictor.")}


def test_every_module_sits_in_a_layer():
    stray = [m for m in _modules() if _layer(m) is None]
    assert stray == [], f"modules outside the layers {LAYERS}: {stray}"


def test_layers_import_only_layers_below():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        here = ".".join(("predictor", *path.relative_to(PACKAGE).with_suffix("").parts))
        if _layer(here) is None:
            continue
        for target in _imports(path):
            if (_layer(target) or -1) > _layer(here):
                upward.append(f"{here} -> {target}")
    assert upward == [], "imports against the layer order:\n" + "\n".join(sorted(upward))


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
    below_app = [m for m in _modules() if _layer(m) is not None and _layer(m) < LAYERS.index("app")]
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

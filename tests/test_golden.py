"""Golden outputs: seeded predictions that a restructuring must leave as they were.

``tests/golden/generate.py`` wrote them; each case here recomputes one and compares it.
A change meant to move predictions regenerates them and names its reason in the commit.
"""

import importlib.util
import json
import math
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"
_spec = importlib.util.spec_from_file_location("golden_generate", GOLDEN / "generate.py")
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)

# XGBoost and numpy may round the last bits differently on another CPU
REL = 1e-9


def _diff(want, got, path="$"):
    if isinstance(want, dict) and isinstance(got, dict):
        if set(want) != set(got):
            return f"{path}: keys {sorted(set(want) ^ set(got))} differ"
        for key in want:
            if (d := _diff(want[key], got[key], f"{path}.{key}")) is not None:
                return d
        return None
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return f"{path}: {len(want)} items, now {len(got)}"
        for i, (w, g) in enumerate(zip(want, got)):
            if (d := _diff(w, g, f"{path}[{i}]")) is not None:
                return d
        return None
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        if math.isclose(want, got, rel_tol=REL, abs_tol=1e-12) or (math.isnan(want) and math.isnan(got)):
            return None
        return f"{path}: {want!r}, now {got!r}"
    return None if want == got else f"{path}: {want!r}, now {got!r}"


@pytest.mark.parametrize("name", generate.names())
def test_golden_output_unchanged(name, tmp_path):
    want = json.loads((GOLDEN / f"{name}.json").read_text())
    got = json.loads(json.dumps(generate.compute(name, tmp_path), sort_keys=True))
    assert _diff(want, got) is None, _diff(want, got)

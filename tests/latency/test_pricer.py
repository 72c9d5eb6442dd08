"""The Pricer (predictor/latency/pricer.py) and the manifest's typed adjustments section:
older sets' top-level keys still load, a saved set writes the section, and the sampler reads
only public names of predictor."""
import ast
import json
from pathlib import Path

import numpy as np

from predictor.core.ops import Call
from predictor.core.profiles import load_hardware
from predictor.latency.adjustments.backward_entry import EntryParams
from predictor.latency.artifacts import LEGACY_KEYS, ModelSet, models_dir
from predictor.latency.lookup import QuantileCache, call_quantiles
from predictor.latency.pricer import Pricer

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_cpu_set_s_older_key_reads_as_typed_params_and_a_save_writes_the_section(tmp_path):
    hw = load_hardware("local-cpu")
    shipped = ModelSet.load(models_dir() / "local-cpu", hw)
    assert "backward_entry_us" in shipped.manifest and "adjustments" not in shipped.manifest  # as shipped
    entry = shipped.adjustment("backward_entry")
    assert isinstance(entry, EntryParams) and entry.entry_us == shipped.manifest["backward_entry_us"]
    shipped.save(tmp_path / "local-cpu")
    saved = json.loads((tmp_path / "local-cpu" / "manifest.json").read_text())
    assert not set(LEGACY_KEYS) & set(saved)
    assert saved["adjustments"]["backward_entry"] == {"version": 1, "params": {"entry_us": entry.entry_us}}
    assert ModelSet.load(tmp_path / "local-cpu", hw).adjustments == shipped.adjustments


def test_the_cache_prices_by_the_pricer():
    hw = load_hardware("h100-sxm")
    models = ModelSet.load(models_dir() / "h100-sxm", hw)
    calls = [Call.of("gemm", "fwd", {"m": 4096, "n": 4096, "k": 4096, "sm_margin": 16}),
             Call.of("grouped_gemm", "bwd", {"batch": 4, "m": 1024, "n": 1536, "k": 4096}),
             Call.of("rmsnorm", "fwd", {"tokens": 4096, "hidden": 8192})]
    q, evidence = Pricer(models, hw).price(calls)
    cached, cached_evidence = QuantileCache(models, hw).lookup(calls)
    np.testing.assert_array_equal(q, cached)
    assert evidence == cached_evidence == call_quantiles(calls, models, hw, hw.train_dtype)[1]
    assert evidence[1].text.endswith("(gemm)") and not evidence[1].prior  # the stand-in: a model's
    assert evidence[2].prior


def test_sampling_imports_only_public_names_of_predictor():
    private = []
    for path in sorted((ROOT / "sampling").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("predictor"):
                private += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                            if a.name.startswith("_")]
    assert private == []

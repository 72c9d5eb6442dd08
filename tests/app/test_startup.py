"""The README's main command answers in well under a second (issue 16: at most 0.6 s on a
warm machine; ``python benchmarks/bench_startup.py`` times it). Wall time is too noisy to
test on a shared machine, so this checks the cause: ``prism predict`` imports none of the
libraries that cost a large part of that budget and that a prediction does not need."""
import subprocess
import sys

import pytest

MAIN = ["predict", "model=gpt3-13b", "hardware=a100-sxm4-80gb", "gpus=64", "parallel.tp=8"]
#: Each costs 0.1-0.5 s to import: pandas (with pyarrow), scikit-learn (with scipy.stats;
#: xgboost imports it unless predictor.latency.regressor imports xgboost), matplotlib
#: (only for plot=), joblib (only to train), torch (never in predictor).
HEAVY = ("pandas", "pyarrow", "sklearn", "scipy.stats", "matplotlib", "joblib", "torch")


def _imported(argv: list[str], modules) -> list[str]:
    code = (f"import sys\nfrom predictor.app.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            f"print(' '.join(m for m in {tuple(modules)!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.splitlines()[-1].split()


def test_predict_imports_only_what_a_prediction_needs():
    # nor Hydra: plain key=value overrides are read without it (predictor.app.config)
    assert _imported(MAIN, (*HEAVY, "hydra")) == []
    assert _imported([*MAIN, "--json"], (*HEAVY, "hydra")) == []


def test_help_imports_no_numerical_library():
    assert _imported(["--help"], ("numpy", "omegaconf", "hydra", *HEAVY)) == []


#: What a sampling process does not need at its start: the distributed layouts (imported by
#: the reference workload where it builds one, ~2 s), DTensor (by the ``dtensor`` op where
#: it builds its pair, ~1 s) and scipy.stats (where the plan is drawn, ~1.7 s). Every
#: rank of a collective job or a cluster job imports these modules, each on a core of a
#: few.
LAYOUT_MODULES = ("torch.distributed.fsdp", "torch.distributed.pipelining", "torch.distributed.tensor",
                  "scipy.stats")


@pytest.mark.slow
def test_a_sampling_process_imports_no_layout_it_does_not_build():
    pytest.importorskip("torch")
    for module in ("sampling.runner", "sampling.collectives"):
        code = f"import sys, {module}\nprint(' '.join(m for m in {LAYOUT_MODULES!r} if m in sys.modules))"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert done.stdout.split() == [], module

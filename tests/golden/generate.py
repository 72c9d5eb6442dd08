"""Write the golden outputs that pin PRISM's behaviour through a restructuring.

Run from the repository root: ``python tests/golden/generate.py``. It writes
``tests/golden/*.json``; ``tests/test_golden.py`` recomputes each one and asserts it is
unchanged. Regenerate only for a change that is meant to move predictions, and name the
reason in the commit.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# (name, prism predict settings): dense, MoE, FP8, NVL72 racks and the CPU, seeded (seed=0 default)
PREDICT_JOBS: list[tuple[str, list[str]]] = [
    ("readme-gpt3-13b-a100", ["model=gpt3-13b", "hardware=a100-sxm4-80gb", "gpus=64", "parallel.tp=8"]),
    ("gpt3-175b-a100-3072", ["model=gpt3-175b", "hardware=a100-sxm4-80gb", "gpus=3072", "parallel.tp=4",
                             "parallel.pp=64", "parallel.micro_batch_size=4", "parallel.global_batch_size=3072",
                             "parallel.recompute=full"]),
    ("llama3-70b-h100-sp", ["model=llama3-70b", "hardware=h100-sxm", "gpus=512", "parallel.tp=8", "parallel.pp=4",
                            "parallel.sequence_parallel=true", "parallel.recompute=selective", "target_step_s=7"]),
    ("llama3-8b-h100-64", ["model=llama3-8b", "hardware=h100-sxm", "gpus=64"]),
    ("llama3-8b-h100-fp8", ["model=llama3-8b", "hardware=h100-sxm", "gpus=64", "hardware.gemm_dtype=fp8"]),
    ("llama3-405b-h100-fp8", ["model=llama3-405b", "hardware=h100-sxm", "gpus=1024", "parallel.tp=8",
                              "parallel.pp=8", "parallel.vpp=4", "parallel.schedule=interleaved",
                              "parallel.sequence_parallel=true", "hardware.gemm_dtype=fp8"]),
    ("llama3-70b-b200-nvfp4", ["model=llama3-70b", "hardware=b200", "gpus=512", "parallel.tp=8",
                               "hardware.gemm_dtype=nvfp4"]),
    ("llama3-70b-gb200-nvl72", ["model=llama3-70b", "hardware=gb200-nvl72", "gpus=144", "parallel.tp=4",
                                "parallel.pp=4"]),
    ("llama3-70b-gb300-nvl72-fp8", ["model=llama3-70b", "hardware=gb300-nvl72", "gpus=288", "parallel.tp=4",
                                    "parallel.pp=4", "hardware.gemm_dtype=fp8"]),
    ("gpt3-13b-h200-confidence", ["model=gpt3-13b", "hardware=h200", "gpus=64", "parallel.tp=8",
                                  "confidence=0.95"]),
    ("llama2-70b-gh200", ["model=llama2-70b", "hardware=gh200", "gpus=256", "parallel.tp=4", "parallel.pp=4",
                          "parallel.recompute=full"]),
    ("llama3-8b-fsdp-torchtitan", ["model=llama3-8b", "hardware=h100-sxm", "gpus=64", "parallel.sharding=fsdp",
                                   "framework=torchtitan"]),
    ("gpt3-6.7b-deepspeed-zero2", ["model=gpt3-6.7b", "hardware=a100-sxm4-80gb", "gpus=32",
                                  "parallel.sharding=zero2", "framework=deepspeed"]),
    ("gpt3-1.3b-megatron-lm", ["model=gpt3-1.3b", "hardware=a100-sxm4-80gb", "gpus=8", "framework=megatron-lm"]),
    ("qwen3-30b-a3b-h100-ep8", ["model=qwen3-30b-a3b", "hardware=h100-sxm", "gpus=64", "parallel.ep=8"]),
    ("qwen3-235b-gb200-ep", ["model=qwen3-235b-a22b", "hardware=gb200-nvl72", "gpus=256", "parallel.pp=4",
                             "parallel.ep=32", "parallel.sequence_parallel=true", "parallel.tp=2",
                             "parallel.etp=1", "parallel.recompute=full"]),
    ("mixtral-8x7b-h100", ["model=mixtral-8x7b", "hardware=h100-sxm", "gpus=64", "parallel.tp=2",
                           "parallel.ep=8", "parallel.sequence_parallel=true"]),
    ("deepseek-v3-gb200", ["model=deepseek-v3", "hardware=gb200-nvl72", "gpus=256", "parallel.pp=8",
                           "parallel.ep=32", "parallel.recompute=full", "parallel.moe_dispatcher=flex"]),
    ("tiny-cpu-dp2", ["model=tiny", "hardware=local-cpu", "parallel.dp=2", "target_step_s=0.05"]),
    ("tiny-moe-cpu", ["model=tiny-moe", "hardware=local-cpu", "parallel.dp=2"]),
]

SEARCH_JOBS: list[tuple[str, list[str]]] = [
    ("search-llama3-70b-h100-1024", ["model=llama3-70b", "hardware=h100-sxm", "gpus=1024", "top=10"]),
    ("search-gpt3-13b-a100-64", ["model=gpt3-13b", "hardware=a100-sxm4-80gb", "gpus=64", "top=10"]),
]

BATCH_TABLE = "data/e2e/e2e_training_visible.csv"
VALIDATE_ARGS = ["measured=measurements/local-cpu-suite-AAA.parquet", "hardware=local-cpu"]

# keys whose values name this run, not the prediction
VOLATILE = {"elapsed_s", "timestamp", "created", "wall_s", "seconds"}
# a CPU profile's models name the CPU they were sampled on and this one: a note that differs by machine
MACHINE_NOTE = "not on this machine ("
# search keeps its ranked top and the fronts (every enumerated layout would be megabytes)
SEARCH_KEYS = {"counts", "draws", "front_memory", "front_risk", "top_layouts", "tier", "global_batch_size"}


def run_cli(argv: list[str]) -> tuple[int, str]:
    from predictor.app.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(argv)
    return rc, out.getvalue()


def scrub(value):
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [scrub(v) for v in value if not (isinstance(v, str) and MACHINE_NOTE in v)]
    return value


def cli_json(verb: str, settings: list[str]) -> dict:
    rc, text = run_cli([verb, *settings, "--json"])
    return {"rc": rc, "output": scrub(json.loads(text))}


def batch_rows(tmp: Path) -> dict:
    import pandas as pd

    out = tmp / "golden-batch.csv"
    out.unlink(missing_ok=True)
    rc, _ = run_cli(["predict-batch", str(ROOT / BATCH_TABLE), f"out={out}", "--json"])
    frame = pd.read_csv(out)
    keep = [c for c in frame.columns if c.startswith("pred_")]
    return {"rc": rc, "columns": keep, "rows": json.loads(frame[keep].to_json(orient="records"))}


def compute(name: str, tmp: Path) -> dict:
    """The current output of one golden case by its file name (without .json)."""
    for job, settings in PREDICT_JOBS:
        if name == f"predict-{job}":
            return cli_json("predict", settings)
    for job, settings in SEARCH_JOBS:
        if name == job:
            result = cli_json("search", settings)
            result["output"] = {k: v for k, v in result["output"].items() if k in SEARCH_KEYS}
            return result
    if name == "predict-batch-e2e":
        return batch_rows(tmp)
    if name == "validate-cpu-suite":
        return cli_json("validate", VALIDATE_ARGS)
    raise KeyError(name)


def names() -> list[str]:
    return ([f"predict-{job}" for job, _ in PREDICT_JOBS] + [job for job, _ in SEARCH_JOBS]
            + ["predict-batch-e2e", "validate-cpu-suite"])


def main() -> int:
    import tempfile

    wanted = sys.argv[1:] or names()
    with tempfile.TemporaryDirectory() as tmp:
        for name in wanted:
            result = compute(name, Path(tmp))
            (HERE / f"{name}.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
            print(name, "rc", result["rc"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ground-truth suite: sample -> train -> measure -> predict -> validate, from scratch.

    python benchmarks/validation_suite.py                       # this CPU, ~19 min
    python benchmarks/validation_suite.py --calibration-from runs/suite-A   # a later run
    python benchmarks/validation_suite.py --hardware h100-sxm   # on a GPU host (1-GPU layouts)
    python benchmarks/validation_suite.py --hardware h200 --stages sample,measure --out runs/h200
    python benchmarks/validation_suite.py --hardware h200 --stages train,validate --out runs/h200

``--stages`` splits the suite between machines: a lent GPU samples and measures, and the
folder comes back to train and validate where time costs nothing.

Every stage is the user-facing command (`prism sample`, `prism train`, `prism measure`,
`prism validate`, `prism calibrate`), run into one fresh folder (``--out``, default
``runs/suite-<hardware>-<UTC time>``): samples/, models/, measured.parquet (the
``--passes`` measured-pass*.parquet merged: each layout measured in passes spread over
the stage), CDF plots and
summary.md, and doubt_rows.csv (each layout's features and error before any calibration:
copied into measurements/, ``benchmarks/bench_doubt.py --save`` lets the predictive
uncertainty learn this machine's error from it). Three validations are reported:

1. ``samples``: predictions from the operator samples alone;
2. ``leave-one-out``: each layout predicted with the in-situ calibration fitted on the
   other layouts of this run (``prism calibrate``);
3. ``calibrated-earlier`` (with ``--calibration-from``): every layout predicted with the
   calibration fitted on an earlier run's measurements, at another time of day.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from predictor.analyses.doubt import measured_errors, write_errors
from predictor.app.config import load_config
from predictor.core.profiles import load_hardware, load_model, section
from predictor.core.specs import SamplingConfig
from predictor.data.measurements import join_passes, pass_repeatability, read_measurements, write_measurements
from predictor.latency.artifacts import ModelSet
from sampling.plan import in_collective_job, round_repeats

#: CPU layouts: world size <= 2 (one core per rank). Two model sizes (tiny 0.6 M, small
#: 9 M parameters), three sequence lengths, dp / tp / pp (1F1B and GPipe, 4+ micro-batches),
#: recompute on and off.
CPU_LAYOUTS = [
    ["model=tiny"],
    ["model=tiny", "parallel.recompute=full"],
    ["model=tiny", "model.seq_length=256", "parallel.micro_batch_size=2"],
    ["model=tiny", "parallel.dp=2"],
    ["model=tiny", "parallel.tp=2"],
    ["model=tiny", "parallel.pp=2", "parallel.global_batch_size=8"],
    ["model=tiny", "parallel.pp=2", "parallel.global_batch_size=8", "parallel.schedule=gpipe"],
    ["model=small"],
    ["model=small", "parallel.recompute=full"],
    ["model=small", "model.seq_length=512"],
    ["model=small", "parallel.dp=2"],
    ["model=small", "parallel.dp=2", "parallel.recompute=full"],
    ["model=small", "parallel.tp=2"],
    ["model=small", "parallel.tp=2", "parallel.recompute=full"],
    ["model=tiny", "model.seq_length=256", "parallel.micro_batch_size=2", "parallel.tp=2"],
    ["model=small", "parallel.pp=2", "parallel.global_batch_size=8"],
]
#: One lent GPU: single-device layouts across model sizes, sequence lengths, micro-batches.
GPU_LAYOUTS = [
    ["model=small"],
    ["model=small", "parallel.micro_batch_size=8"],
    ["model=gpt3-1.3b", "model.seq_length=1024", "model.num_layers=4"],
    ["model=gpt3-1.3b", "model.seq_length=2048", "model.num_layers=4", "parallel.recompute=full"],
    ["model=llama3-8b", "model.num_layers=2", "model.seq_length=1024"],
    ["model=llama3-8b", "model.num_layers=2", "model.seq_length=2048", "parallel.micro_batch_size=2"],
]


STAGES = ("sample", "train", "measure", "validate")


def seq_lengths(layouts: list[list[str]], plan: list[str]) -> list[int]:
    """The plan's sequence lengths and every one the layouts train at (an override, or the
    model's own): the sample plan targets its models at each, so that no layout's shapes are left to the
    space-filling design (a layout whose length the plan left out came
    out far under)."""
    lengths = set(section(load_config(plan), "sampling", SamplingConfig).seq_lengths)
    for overrides in layouts:
        given = dict(o.split("=", 1) for o in overrides)
        lengths.add(int(given.get("model.seq_length", load_model(given["model"]).seq_length)))
    return sorted(lengths)


def one_gpu_plan() -> list[str]:
    """The GPU plan (conf/sampling/gpu.yaml) for one GPU: its ops but those timed on a group
    of ranks (collectives, DTensor pairs)."""
    sc = section(load_config(["sampling=gpu"]), "sampling", SamplingConfig)
    ops = [op for op in sc.ops if not in_collective_job(op)]
    return ["sampling=gpu", f"sampling.ops=[{','.join(ops)}]"]


def prism(*args: str, capture: bool = False, stop: bool = True) -> str:
    """Run one `prism` verb in a fresh interpreter; stop the suite if it fails (or, with
    ``stop`` off, say so and go on)."""
    cmd = [sys.executable, "-m", "predictor.app.cli", *args]
    print("$ prism " + " ".join(args), flush=True)
    done = subprocess.run(cmd, stdout=subprocess.PIPE if capture else None, text=True)
    if done.returncode and stop:
        raise SystemExit(f"prism {args[0]} failed (exit {done.returncode})")
    if done.returncode:
        print(f"prism {args[0]} failed (exit {done.returncode}); the suite goes on without it", flush=True)
    return done.stdout or ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hardware", default="local-cpu", help="conf/hardware profile of this machine")
    ap.add_argument("--out", type=Path, help="the suite's folder (default runs/suite-<hardware>-<time>)")
    ap.add_argument("--budget", type=float, default=300, help="sampling budget, seconds")
    ap.add_argument("--steps", type=int, default=30, help="measured steps per layout")
    ap.add_argument("--passes", type=int, default=3,
                    help="measure runs per layout, each of its share of --steps, one pass over every layout after "
                         "another: a layout's steps span the stage, not one moment of it (a 2-core slice's speed "
                         "wanders 1.5x over tens of seconds)")
    ap.add_argument("--calibration-from", type=Path, help="an earlier suite folder whose calibration to test here")
    ap.add_argument("--stages", default=",".join(STAGES),
                    help=f"the stages to run, of {','.join(STAGES)}; a later stage reads the files of an earlier "
                         f"one in --out")
    args = ap.parse_args()
    stages_asked = args.stages.split(",")
    if not set(stages_asked) <= set(STAGES) or not stages_asked:
        ap.error(f"--stages={args.stages}: choose among {','.join(STAGES)}, comma-separated")
    if stages_asked != list(STAGES) and not args.out:
        ap.error("--stages: name the suite's folder with --out, so that the other stages find it")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or Path("runs") / f"suite-{args.hardware}-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    layouts = CPU_LAYOUTS if args.hardware == "local-cpu" else GPU_LAYOUTS
    hw = f"hardware={args.hardware}"
    t0 = time.perf_counter()
    stages = {}

    if "sample" in stages_asked:
        plan = ["sampling=quick"] if args.hardware == "local-cpu" else one_gpu_plan()
        plan.append(f"sampling.seq_lengths=[{','.join(map(str, seq_lengths(layouts, plan)))}]")
        prism("sample", hw, *plan, f"sampling.budget_s={args.budget}", f"output_dir={out / 'samples'}")
        stages["sample"] = time.perf_counter() - t0
    if "train" in stages_asked:
        prism("train", hw, f"samples={out / 'samples'}", f"models_dir={out / 'models'}")
        stages["train"] = time.perf_counter() - t0 - sum(stages.values())
    if "measure" in stages_asked:
        if not 1 <= args.passes <= args.steps:
            ap.error(f"--passes={args.passes}: from 1 to --steps={args.steps}")
        passes = [out / f"measured-pass{p + 1}.parquet" for p in range(args.passes)]
        for path, steps in zip(passes, round_repeats(args.steps, args.passes)):
            path.unlink(missing_ok=True)
            for overrides in layouts:
                # a layout this machine cannot run leaves the others' ground truth standing
                prism("measure", hw, *overrides, f"measure.steps={steps}", f"out={path}", stop=False)
        write_measurements(join_passes([read_measurements(p) for p in passes if p.exists()]), out / "measured.parquet",
                           append=False)
        stages["measure"] = time.perf_counter() - t0 - sum(stages.values())
    if "validate" not in stages_asked:
        print(f"suite folder: {out} (stages {args.stages}; " +
              ", ".join(f"{k} {v / 60:.1f} min" for k, v in stages.items()) + ")")
        return
    measured, models = f"measured={out / 'measured.parquet'}", f"models_dir={out / 'models'}"
    profile = load_hardware(args.hardware)
    here = out / "models" / args.hardware
    trained = ModelSet.load(here, profile)
    if trained.calibration is not None:  # an earlier validate stage's: not the samples alone
        print(f"{here}: the calibration an earlier validate stage stored is taken out first", flush=True)
        trained.save_calibration(here, None)
    tables = {"samples": pd.DataFrame(json.loads(prism("validate", hw, measured, models, f"out={out / 'cdf.png'}",
                                                       "--json", capture=True)))}
    # the composer's error here, before `prism calibrate` stores a calibration with the models:
    # copied to measurements/<hardware>-suite-<name>-doubt.csv, the error model learns from it
    write_errors(measured_errors(read_measurements(out / "measured.parquet"),
                                 trained, profile,
                                 f"{args.hardware}-{out.name}"), out / "doubt_rows.csv")
    calibrated = json.loads(prism("calibrate", hw, measured, models, "--json", capture=True))
    tables["leave-one-out"] = pd.DataFrame(calibrated["layouts"])
    if args.calibration_from:
        earlier = ModelSet.load(args.calibration_from / "models" / args.hardware, profile)
        ModelSet.load(here, earlier.hw).save_calibration(here, earlier.calibration)
        tables["calibrated-earlier"] = pd.DataFrame(json.loads(prism(
            "validate", hw, measured, models, f"out={out / 'cdf-calibrated-earlier.png'}", "--json", capture=True)))
    stages["validate"] = time.perf_counter() - t0 - sum(stages.values())

    wall = time.perf_counter() - t0
    text = (f"suite on {args.hardware}, {stamp}, {len(layouts)} layouts x {args.steps} steps"
            f" ({len(list(out.glob('measured-pass*.parquet'))) or 1} passes)\n")
    for name, table in tables.items():
        shown = table[["layout_id", "measured_p50_s", "predicted_p50_s", "median_ape", "p95_ape", "ks",
                       "coverage_80", "p95_p50_meas", "p95_p50_pred"]]
        text += (f"\n## {name}\n" + shown.to_string(index=False, float_format=lambda v: f"{v:.4f}") + "\n"
                 f"{name}: median abs. error of the median step {table.median_ape.median():.1%} (worst "
                 f"{table.median_ape.max():.1%}), of p95 {table.p95_ape.median():.1%}; median KS "
                 f"{table.ks.median():.3f}; median 80% coverage {table.coverage_80.median():.1%}; p95/p50 "
                 f"within 5% for {(abs(table.p95_p50_pred / table.p95_p50_meas - 1) <= 0.05).sum()}/{len(table)}"
                 + (f"; the 80% predictive interval holds the measured median in "
                    f"{int(table.median_in_80.sum())}/{len(table)}" if "median_in_80" in table else "") + "\n")
    pass_files = sorted(out.glob("measured-pass*.parquet"))
    if len(pass_files) > 1:
        table = pass_repeatability([read_measurements(p) for p in pass_files])
        text += ("\n## repeatability (the measured median step pass by pass)\n"
                 + table.to_string(index=False, float_format=lambda v: f"{v:.4f}") + "\n"
                 f"repeatability: a pass's median departs from the layout's pooled median by at most "
                 f"{table.worst_pass_departure.median():.1%} (median over layouts; worst "
                 f"{table.worst_pass_departure.max():.1%}, {table.layout_id[table.worst_pass_departure.idxmax()]})\n")
        steal = table.filter(regex=r"^pass\d+_steal$")
        if not steal.empty:
            text += (f"steal (the hypervisor's share of the busy CPU time during the steps, mean per layout and pass): "
                     f"median {steal.stack().median():.2%}, largest {steal.stack().max():.2%}\n")
    text += (f"\ncalibration fitted here: {calibrated['calibration']}\n"
             f"wall {wall / 60:.1f} min (" + ", ".join(f"{k} {v / 60:.1f}" for k, v in stages.items()) + ")\n")
    (out / "summary.md").write_text(text)
    print(text)
    print(f"suite folder: {out}")


if __name__ == "__main__":
    main()

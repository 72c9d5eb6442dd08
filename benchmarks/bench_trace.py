"""Trace import: does a trace of the reference workload predict that workload, and how fast
is a big trace read?

1. For each layout: `prism measure` times it (untraced steps) and records torch.profiler
   traces of a few more steps; `prism import-trace` turns them into samples, `prism train`
   fits models on them alone, `prism predict` predicts the layout. Prints the measured
   median step, the predicted p50 and the error (goal: within 10%), with and without the
   composed host ops (predictor.workload.host: here the framework time the traced steps
   measured between the recognised ops, imported as ``dispatch`` rows), and that time
   per compute call.
2. A 500 MB trace, made by repeating a real one's steps (timestamps, ids and sequence
   numbers shifted), is imported in a child process: wall time (goal: <= 2 minutes) and
   peak resident memory.

    python benchmarks/bench_trace.py                 # both (~5 min on 2 cores)
    python benchmarks/bench_trace.py --size-mb 100   # a smaller big trace
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from predictor.analyses.predict import predict
from predictor.app.config import load_config
from predictor.core.layout import resolve_layout
from predictor.core.profiles import section
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig, RegressorConfig
from predictor.data.importers.trace import import_trace
from predictor.data.store import read_samples
from predictor.engine.compose import compose
from predictor.latency.artifacts import ModelSet, train
from predictor.workload.decompose import decompose

LAYOUTS = {  # the reference workload on this machine: one rank, and two data-parallel gloo ranks
    "small dp1": ["model=small"],
    "small dp2": ["model=small", "parallel.dp=2"],
    "tiny dp1": ["model=tiny"],
}


def _without_host(work):
    """``work`` without its host ops: the operators alone."""
    def device(calls):
        return [c for c in calls if c.role != "host"]
    return replace(work, stages=[replace(st, forward=device(st.forward), backward=device(st.backward),
                                         step=device(st.step)) for st in work.stages])


def accuracy(work: Path, steps: int, trace_steps: int) -> list[dict]:
    from sampling.measure import measure
    results = []
    for name, overrides in LAYOUTS.items():
        folder = work / name.replace(" ", "-")
        cfg = load_config([*overrides, f"measure.steps={steps}", f"measure.trace_dir={folder / 'traces'}",
                           f"measure.trace_steps={trace_steps}", f"out={folder / 'measured.parquet'}"])
        measured = measure(cfg, progress=False)
        report = import_trace(sorted((folder / "traces").glob("*.json")), folder / "samples", hardware="local-cpu")
        cfg = load_config([*overrides, "hardware=local-cpu", f"models_dir={folder / 'models'}"])
        hw = section(cfg, "hardware", HardwareConfig)
        models = train(read_samples(folder / "samples"), hw, section(cfg, "regressor", RegressorConfig))
        directory = models.save(folder / "models" / hw.name)
        model, par = section(cfg, "model", ModelConfig), section(cfg, "parallel", ParallelConfig)
        predicted = predict(model, hw, par, models_dir=folder / "models").step_time_s["p50"]
        workload = decompose(model, resolve_layout(par, None), hw)
        alone = float(np.median(compose(_without_host(workload), ModelSet.load(directory, hw), draws=2000).draws))
        m = measured.median_step_s
        results.append({
            "layout": name, "measured_median_s": m, "traced_step_median_s": report.step_ms_median / 1e3,
            "predicted_p50_s": predicted, "error": predicted / m - 1,
            "ops_alone_p50_s": alone, "ops_alone_error": alone / m - 1,
            "attributed_share": report.attributed_share, "op_overhead_us": report.op_overhead_us,
            "rows": report.rows, "unknown_calls": sum(u["calls"] for u in report.unknown_ops),
            "disturbed_steps": report.disturbed_steps})
        r = results[-1]
        print(f"{name:10s} measured {m * 1e3:7.1f} ms | traced steps {r['traced_step_median_s'] * 1e3:7.1f} ms | "
              f"predicted p50 {r['predicted_p50_s'] * 1e3:7.1f} ms ({r['error']:+.1%}) | ops alone "
              f"{r['ops_alone_p50_s'] * 1e3:7.1f} ms ({r['ops_alone_error']:+.1%}) | ops cover "
              f"{r['attributed_share']:.0%} of the traced step, traced framework time "
              f"{r['op_overhead_us']:.0f} us/call"
              + "".join(f" | {d['file']} left out ({d['ms']:.1f} ms)" for d in report.disturbed_steps),
              flush=True)
    return results


def write_big_trace(source: Path, path: Path, size_mb: float) -> int:
    """Repeat ``source``'s events, shifted, until ``path`` holds ``size_mb`` MB; returns the event count."""
    doc = json.loads(source.read_text())
    events = [e for e in doc.pop("traceEvents") if e.get("ph") == "X"]
    span = max(e["ts"] + e.get("dur", 0) for e in events) - min(e["ts"] for e in events) + 1000
    ext = max(e.get("args", {}).get("External id", 0) for e in events) + 1
    seq = max(e.get("args", {}).get("Sequence number", 0) for e in events) + 1
    written, copy, count = 0, 0, 0
    with open(path, "w") as f:
        head = json.dumps(doc)[:-1]
        f.write(head + ', "traceEvents": [\n')
        while written < size_mb * 1e6:
            parts = []
            for e in events:
                e = {**e, "ts": e["ts"] + copy * span, "args": dict(e.get("args", {}))}
                if "External id" in e["args"]:
                    e["args"]["External id"] += copy * ext
                if "Sequence number" in e["args"]:
                    e["args"]["Sequence number"] += copy * seq
                if e["name"].startswith("ProfilerStep#"):
                    e["name"] = f"ProfilerStep#{copy}"
                parts.append(json.dumps(e))
            chunk = ("," if copy else "") + ",\n".join(parts)
            f.write(chunk)
            written += len(chunk)
            count += len(parts)
            copy += 1
        f.write("\n]}\n")
    return count


def big_trace(source: Path, work: Path, size_mb: float) -> dict:
    path = work / "big.json"
    events = write_big_trace(source, path, size_mb)
    child = ("import json, resource, time\n"
             "from predictor.data.importers.trace import import_trace\n"
             f"t = time.perf_counter(); r = import_trace([{str(path)!r}], {str(work / 'big-samples')!r}, "
             "hardware='local-cpu')\n"
             "print(json.dumps({'seconds': time.perf_counter() - t, 'rows': r.rows, 'events': r.events,\n"
             "  'peak_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    result = {"trace_mb": path.stat().st_size / 1e6, "written_events": events, **json.loads(out.stdout)}
    print(f"big trace  {result['trace_mb']:.0f} MB, {result['events']:,} events -> {result['rows']:,} rows in "
          f"{result['seconds']:.1f} s, peak memory {result['peak_rss_mb']:.0f} MB", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="timed (untraced) steps per layout")
    parser.add_argument("--trace-steps", type=int, default=3, help="traced steps per rank")
    parser.add_argument("--size-mb", type=float, default=500, help="size of the big trace")
    parser.add_argument("--skip-accuracy", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="prism-bench-trace-") as tmp:
        work = Path(tmp)
        t0 = time.monotonic()
        if not args.skip_accuracy:
            results = accuracy(work, args.steps, args.trace_steps)
            errors = sorted(abs(r["error"]) for r in results)
            print(f"within 10%: {sum(e <= 0.10 for e in errors)}/{len(errors)} layouts; "
                  f"worst {errors[-1]:.1%}", flush=True)
            source = sorted((work / "small-dp1" / "traces").glob("*.json"))[0]
        else:
            from sampling.measure import measure
            measure(load_config(["model=small", "measure.steps=1", f"measure.trace_dir={work / 't'}",
                                 "measure.trace_steps=1", f"out={work / 'm.parquet'}"]), progress=False)
            source = sorted((work / "t").glob("*.json"))[0]
        big_trace(source, work, args.size_mb)
        print(f"total {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()

"""The verbs that build the latency models: ``prism sample`` (time operators on this machine
into the sample store; it imports the torch-based :mod:`sampling` package only when it runs,
so that ``predictor`` never imports torch), ``prism train`` (fit the models from a sample
store) and ``prism evaluate`` (score them on one)."""
from __future__ import annotations

import sys
from dataclasses import asdict
from importlib import import_module

from predictor.app.output import pd_table, show
from predictor.app.settings import Config, flag, load
from predictor.app.verbs import verb
from predictor.core.errors import PrismError
from predictor.core.files import writable

#: Shapes below which a trained model is reported as thin (prism train's note).
FEW_SHAPES = 4


def sampling_module(verb: str, module: str):
    """A torch-based module of :mod:`sampling`, imported only when a measuring verb runs."""
    try:
        return import_module(module)
    except ImportError as exc:
        raise PrismError(f"prism {verb} needs torch ({exc}); install the measuring extra: "
                         f"pip install -e '.[sampling]'") from None


@verb("sample", help="measure operator latencies on this machine into the sample store",
      description="Time every op of the sampling plan (compute ops in this process, "
                  "collectives under torchrun) and write every repeat to a new Parquet run "
                  "in output_dir. Re-running the same command resumes: shapes already "
                  "stored are skipped (a plan whose sampling.budget_s is spent resumes with a larger one: the "
                  "budget counts its runs together). Ctrl-C keeps every flushed row. Started as the ranks of a "
                  "torchrun or srun job, it samples the cluster as one job: every rank times the "
                  "compute plan, the ranks jointly time the collectives within and across nodes, "
                  "and rank 0 joins every rank's parts into one run (README: Sampling a cluster).",
      examples=["prism sample hardware=local-cpu sampling=quick sampling.budget_s=60 output_dir=samples/cpu",
                "prism sample sampling.ops=[gemm,attention] sampling.shapes_per_op=40",
                "prism sample hardware=h100-sxm sampling.dtypes=[bfloat16,float16]   # on a GPU host",
                "torchrun --standalone --nproc_per_node=8 --no-python prism sample hardware=h100-sxm "
                "sampling=cluster output_dir=samples/cluster   # one node, 8 ranks"],
      reads=Config("output_dir"))
def _sample(command) -> int:
    cfg = load(command)
    runner = sampling_module("sample", "sampling.runner")
    report = runner.run_sampling(cfg, progress=sys.stderr.isatty() or not cfg.output == "json")
    if report.rank:  # a cluster job's other ranks: one line each; rank 0 reports the run
        print(f"prism sample: rank {report.rank}: {report.status}, {report.rows} rows in {report.elapsed_s:.1f} s"
              + "".join(f"; {f['task']}: {f['error']}" for f in report.failures), file=sys.stderr)
        return 130 if report.status == "interrupted" else 0
    lines = [f"run file     {report.run_file or '(none: no row measured)'}",
             f"status       {report.status}",
             f"rows         {report.rows}  ({report.elapsed_s:.1f} s)",
             f"resumed      {report.resumed_tasks} task(s) of plan {report.plan_id} were already stored"
             + (f", and {report.resumed_repeats} repeats of the tasks an earlier run left part-done"
                if report.resumed_repeats else ""),
             f"still to do  {report.remaining_tasks} task(s)"
             + (" not yet whole (a task's repeats come in rounds: one part-done counts until its last)"
                if report.remaining_tasks else "")]
    if report.shapes_per_op:
        lines.append("shapes       " + ", ".join(f"{op} {n}" for op, n in report.shapes_per_op.items()))
    for r in report.recovered:
        lines.append(f"recovered    {r} (a run killed before it could close)")
    if report.retaken:
        lines.append(f"retaken      {report.retaken} compute call(s) timed again: the hypervisor took more than "
                     f"sampling.max_steal of the busy CPU time while they ran (steal, /proc/stat)")
    if report.ranks:
        lines.append(f"ranks        {len(report.ranks)} reported: " + ", ".join(
            f"{r['rank']}@{r['host']}/node{r['node']} {r['status']} {r['rows']} rows" for r in report.ranks))
    for f in report.failures:
        lines.append(f"failed       {f['task']}: {f['error']}")
    if report.status == "interrupted":
        lines.append("interrupted: every flushed row is kept; run the same command again to resume")
    elif report.status == "incomplete":
        lines.append("incomplete: a rank failed or was lost (above); every row the others measured is stored: run "
                     "the same job again to measure what it left")
    elif report.status == "budget":
        lines.append(f"budget spent with {report.remaining_tasks} task(s) left: run again with a larger "
                     f"sampling.budget_s to measure them (stored shapes are skipped)")
    elif report.status == "nothing-to-do" and report.remaining_tasks:
        lines.append(f"nothing to do: the plan's sampling.budget_s is spent by its earlier runs, with "
                     f"{report.remaining_tasks} task(s) left; the same command with a larger sampling.budget_s "
                     f"measures them (the budget counts the plan's runs together)")
    elif report.status == "nothing-to-do":
        lines.append("nothing to do: this plan is already measured; change the plan to measure more")
    show(cfg, asdict(report), "\n".join(lines))
    return 130 if report.status == "interrupted" else 1 if report.status == "incomplete" else 0


def _hardware_and_samples(cfg):
    from predictor.core.profiles import section
    from predictor.core.specs import HardwareConfig
    from predictor.data.store import no_runs, read_samples, refuse_mixed_threads
    if not cfg.samples:
        raise PrismError("samples: required, e.g. samples=samples/cpu (a folder of runs or one .parquet file)",
                         field='samples')
    hw, samples = section(cfg, "hardware", HardwareConfig), read_samples(cfg.samples)
    if samples.empty:
        raise PrismError(f"samples={cfg.samples}: {no_runs(cfg.samples)}", field='samples')
    refuse_mixed_threads(cfg.samples, hw.name)
    return hw, samples


@verb("train", help="train the latency-distribution models of one hardware from samples",
      description="Fit one multi-quantile XGBoost model per (op, pass) present in the samples "
                  "for the hardware, on log(latency / roofline floor), with conformally "
                  "calibrated intervals; also fit the per-step variability the samples show into "
                  "variability.json, which predictions then use instead of the profile's cited figures: the "
                  "machine's speed drift from compute shapes timed in rounds (temporal), what collective sizes "
                  "timed in one round share (regime), the spread between ranks of a cluster job (spatial); "
                  "fit_variability=false keeps the cited ones; a store of which over 5% of the shapes stalled "
                  "while sampled (slowest repeat over 10x the median) is refused unless allow_disturbed=true, and "
                  "any such shapes are counted in the output and the manifest; write "
                  "<models_dir>/<hardware>/<op>__<pass>.ubj.gz, variability.json and "
                  "manifest.json as a whole (a temporary folder renamed into place). models_dir defaults "
                  "to runs/models, not the shipped models/ (prism predict's default): predict with the "
                  "new models by passing the same models_dir=.",
      examples=["prism train samples=samples/ett hardware=a100-sxm4-80gb     # into runs/models/a100-sxm4-80gb",
                "prism predict model=gpt3-13b hardware=a100-sxm4-80gb gpus=64 models_dir=runs/models",
                "prism train samples=samples/cpu regressor.params.n_estimators=300 models_dir=/tmp/models",
                "prism train samples=samples/cpu hardware=local-cpu models_dir=models   # replace the shipped set"],
      reads=Config("samples", "models_dir", "fit_variability", "allow_disturbed"))
def _train(command) -> int:
    from predictor.core.profiles import section
    from predictor.core.specs import RegressorConfig
    from predictor.data.store import store_around, writer_lock
    from predictor.latency.artifacts import TRAINED_MODELS
    cfg = load(command)
    hw, samples = _hardware_and_samples(cfg)
    rc = section(cfg, "regressor", RegressorConfig)
    fit = flag(cfg, "fit_variability")
    allow = flag(cfg, "allow_disturbed")
    store = store_around(cfg.models_dir or TRAINED_MODELS)
    if store is not None:  # a set's files among the runs: read as runs, and the runs replaced with the set's folder
        raise PrismError(f"models_dir={cfg.models_dir}: inside the sample store {store}, among its runs; write the "
                         f"models outside it, e.g. models_dir=runs/models; nothing written", field="models_dir")
    root = writable("models_dir", cfg.models_dir or TRAINED_MODELS, folder=True)  # the shipped models/ when unnamed
    # one train at a time into a models folder, as one prism sample into a store: the last save would win
    with writer_lock(root, "models_dir", "prism train is writing models into this folder",
                     "train into another models_dir") as note:
        return _train_locked(cfg, hw, samples, rc, fit, allow, root, note)


def _train_locked(cfg, hw, samples, rc, fit, allow_disturbed, root, lock_note) -> int:
    import time

    from predictor.app.config import shell_setting
    from predictor.data.store import run_files, thread_counts, without_metadata
    from predictor.latency.artifacts import check_replaceable, disturbed_note, train
    from predictor.latency.variability_fit import fit_variability
    check_replaceable(root / hw.name)  # before the fit, not after it
    t0 = time.perf_counter()
    models = train(samples, hw, rc, n_jobs=2, allow_disturbed=allow_disturbed)
    # the one thread count its runs were sampled at (refuse_mixed_threads), which prism validate compares
    models.manifest["samples"]["threads"] = next(iter(thread_counts(cfg.samples, hw.name)), None)
    # what the samples show of the per-step factors (predictor.latency.variability_fit); None keeps the cited figures
    models.variability = fit_variability(samples, hw) if fit else None
    elapsed = time.perf_counter() - t0
    directory = models.save(root / hw.name)
    rows = [{"op": op, "pass": p, "rows": m.info["rows"], "shapes": m.info["shapes"],
             "calibration_shapes": m.info["calibration_shapes"],
             "kib": round(sum((directory / f["file"]).stat().st_size
                              for f in models.manifest["models"][f"{op}/{p}"]["files"].values()) / 1024)}
            for (op, p), m in sorted(models.models.items())]
    table = pd_table(rows) + f"\n{len(rows)} models for {hw.name} in {directory} ({elapsed:.1f} s)"
    thin = [f"{r['op']}/{r['pass']} ({r['shapes']})" for r in rows
            if r["shapes"] < FEW_SHAPES or not r["calibration_shapes"]]
    if thin:
        table += (f"\nnote: {len(thin)} model(s) rest on fewer than {FEW_SHAPES} shapes or have none held out to "
                  f"calibrate their intervals: {', '.join(thin)}; away from those shapes they follow the roofline "
                  f"floor alone and their bands are not calibrated: sample more shapes (sampling.shapes_per_op)")
    if models.variability is not None:
        table += ("\nvariability measured from the samples' repeats (variability.json, used instead of the profile's): "
                  + ", ".join(f"{k} {s.sigma:.3g} ({f'{s.shapes} shapes' if s.shapes else s.basis})"
                              for k, s in models.variability.sigmas.items()))
    models_dir = shell_setting("models_dir", root)
    use = f"prism predict hardware={hw.name} {models_dir}"
    table += f"\npredict with them: {use} (every verb that reads models takes {models_dir})"
    table += f"\nnote: {models.replaced}" if models.replaced else ""
    table += f"\nnote: {lock_note}" if lock_note else ""
    disturbed = disturbed_note(models.manifest.get("disturbed"))
    table += f"\n{disturbed}" if disturbed else ""
    bare = without_metadata(cfg.samples)
    if bare:
        shown = ", ".join(f.name for f in bare[:3]) + (" ..." if len(bare) > 3 else "")
        table += (f"\nnote: {len(bare)} of {len(run_files(cfg.samples))} run file(s) carry no PRISM metadata "
                  f"(written by another tool, or stripped: {shown}): "
                  f"what hardware and thread count they were sampled at, and whether the machine was busy, cannot be "
                  f"checked; their rows are trained on as {hw.name}'s")
    show(cfg, {"hardware": hw.name, "models_dir": str(root), "folder": str(directory), "seconds": elapsed,
               "models": rows, "few_shapes": thin,
               "variability": models.variability.to_dict() if models.variability else None,
               "predict": use, "replaced": models.replaced, "disturbed": models.manifest.get("disturbed"),
               "without_metadata": [str(f) for f in bare]}, table)
    return 0


@verb("evaluate", help="score trained models on a sample store (MAPE, pinball, coverage)",
      description="Per op and pass (collectives: per topology, nodes x ranks per node, with the network "
                  "their models were trained on; a cluster's own samples describe its own network): the "
                  "median's MAPE against each shape's measured median, the pinball loss on "
                  "log latency, and the coverage of the 80% and 90% intervals. by=origin "
                  "groups by where rows came from instead (e.g. ETT's functions).",
      examples=["prism evaluate samples=samples/ett hardware=a100-sxm4-80gb --json",
                "prism evaluate samples=samples/ett hardware=a100-sxm4-80gb by=origin"],
      reads=Config("samples", "models_dir", "by"))
def _evaluate(command) -> int:
    from predictor.latency.artifacts import ModelSet, models_dir
    from predictor.latency.evaluate import evaluate, trained_on
    cfg = load(command)
    hw, samples = _hardware_and_samples(cfg)
    models = ModelSet.load(models_dir(cfg.models_dir) / hw.name, hw)
    result = evaluate(models, samples, by=cfg.by)
    if result.empty:
        held = ", ".join(sorted(map(str, samples["hardware"].dropna().unique()))) or "nothing"
        raise PrismError(f"samples={cfg.samples}: no rows of an op with a model for {hw.name} (they hold: {held}); "
                         f"give the hardware the samples were taken on", field='samples')
    table = result.to_string(index=False, float_format=lambda v: f"{v:.4f}")
    own = samples[samples["hardware"] == hw.name]
    unscored = own.groupby(["op", "pass"]).size()
    unscored = unscored[[not models.has(op, p) for op, p in unscored.index]]
    if len(unscored):  # a set of fewer models than the store has ops: say what went unscored
        shown = ", ".join(f"{op}/{p} ({n:,})" for (op, p), n in unscored.items())
        table += (f"\nnote: not scored, no model of them in {models_dir(cfg.models_dir) / hw.name}: {shown} rows "
                  f"({int(unscored.sum()):,} in all)")
    in_sample = trained_on(models, samples)
    if in_sample:
        table += ("\nnote: these are the samples the models were trained on (the manifest's hash): the scores are "
                  "in-sample; evaluate on samples kept out of training (another run) for a test")
    show(cfg, [r | {"in_sample": in_sample} for r in result.to_dict(orient="records")], table)
    return 0

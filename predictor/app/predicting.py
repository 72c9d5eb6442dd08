"""The verbs that predict: ``prism predict`` (one job), ``prism variability`` (its risk at
scale), ``prism compare`` (one job on several profiles), ``prism search`` (every layout of
a GPU count) and ``prism predict-batch`` (every job of a CSV table)."""
from __future__ import annotations

import sys
from dataclasses import asdict

from predictor.app.grammar import Paths, listed
from predictor.app.output import as_json, show_result
from predictor.app.settings import Config, Plain, flag, job, keywords, load, read_plain
from predictor.app.verbs import verb
from predictor.core.errors import PrismError
from predictor.data.runs_table import schema_help


@verb("predict", help="predict the step-time distribution, throughput, memory, time and cost to train",
      description="Decompose the workload (model + parallel layout + hardware + GPU count) into "
                  "operator calls, draw their latencies from the trained models (or the network / "
                  "roofline priors where none apply), walk the pipeline schedule over Monte Carlo "
                  "draws and report step-time quantiles, the CDF, tokens/s, MFU, memory per GPU, "
                  "time and cost to train train_tokens with a band, the critical-path breakdown "
                  "(compute, exposed communication, bubble, and host-bound time: the framework's calls "
                  "the device waits for), and what the numbers rest on. gpus=N sets dp = N / (tp·pp·cp). "
                  "confidence=0.95 also reports the step time and time to train that hold with that "
                  "probability. On a CPU profile whose models were sampled on another machine, the report "
                  "says so; sample_if_missing=true samples and trains this one first.",
      examples=["prism predict model=gpt3-13b hardware=a100-sxm4-80gb gpus=64 parallel.tp=8",
                "prism predict model=llama3-70b hardware=h100-sxm parallel.tp=8 parallel.pp=4 gpus=512 "
                "parallel.sequence_parallel=true",
                "prism predict model=qwen3-30b-a3b hardware=h100-sxm gpus=64 parallel.ep=8   "
                "# MoE: experts over 8 GPUs",
                "prism predict model=llama3-70b hardware=b200 gpus=512 parallel.tp=8 hardware.gemm_dtype=nvfp4  "
                "# FP4 GEMMs (or fp8, mxfp8)",
                "prism predict model=tiny hardware=local-cpu parallel.dp=2 target_step_s=0.05 --json",
                "prism predict model=tiny hardware=local-cpu sample_if_missing=true   # this CPU's own models "
                "(samples ~5 min first)",
                "prism predict model=gpt3-13b hardware=h100-sxm gpus=64 parallel.tp=8 plot=step.png  "
                "# CDF + critical path",
                "prism predict model=llama3-70b hardware=h100-sxm gpus=16384 parallel.tp=8 parallel.pp=8 "
                "confidence=0.95"],
      reads=Config("gpus", "plot", "models_dir", "train_tokens", "framework", "target_step_s", "confidence",
                   "sample_if_missing"))
def _predict(command) -> int:
    from predictor.analyses.predict import predict
    from predictor.app.plots import plot_path, prediction_figure
    from predictor.app.render import format_prediction
    cfg = load(command)
    png = plot_path(cfg.plot)
    work = job(cfg)
    if flag(cfg, "sample_if_missing"):
        cfg.models_dir = _sample_this_machine(work[1], cfg.models_dir)
    p = predict(*work, cfg.gpus,
                **keywords(cfg, "models_dir", "seed", "train_tokens", "target_step_s", "confidence", "framework"))
    given = {text.partition("=")[0].lstrip("+~") for text in command.settings}
    if "hardware" not in given:
        p.notes.append(f"hardware={p.hardware}, the default (no hardware= given); for a GPU job name its profile, "
                       f"e.g. hardware=h100-sxm")
    return show_result(cfg, p, format_prediction(p), png, prediction_figure, 16,
                       "none (plot=predict.png draws the step-time CDF and the critical path)")


def _sample_this_machine(hardware, models_dir) -> str | None:
    """``sample_if_missing=true``: where a CPU profile has no models of this machine (none,
    or sampled on another CPU), sample this one and train on it (``prism sample`` and
    ``prism train`` into runs/), and predict with those models."""
    import subprocess
    import sys

    from predictor.latency.artifacts import TRAINED_MODELS, foreign_device, trained_models
    if hardware.device.kind != "cpu":
        raise PrismError(f"sample_if_missing=true: {hardware.name} is a GPU profile; sample it on its own host "
                         f"(prism sample hardware={hardware.name} there), then prism train", field="sample_if_missing")
    models = trained_models(hardware, models_dir)
    if models is not None and foreign_device(models) is None:
        return models_dir
    samples = f"runs/samples/{hardware.name}"
    for name, words in (("sample", [f"hardware={hardware.name}", "sampling=quick", f"output_dir={samples}"]),
                        ("train", [f"samples={samples}", f"hardware={hardware.name}",
                                   f"models_dir={TRAINED_MODELS}"])):
        print(f"sample_if_missing: prism {name} {' '.join(words)}", file=sys.stderr, flush=True)
        if subprocess.run([sys.executable, "-m", "predictor.app.cli", name, *words]).returncode:
            raise PrismError(f"sample_if_missing: prism {name} failed (above); run it yourself to see why",
                             field="sample_if_missing")
    return str(TRAINED_MODELS)


@verb("variability", help="slowdown risk versus scale, what drives the spread, where slow nodes hurt, goodput",
      description="For one layout: (1) P(step >= (1+x) x nominal step) for x in analysis.thresholds at each "
                  "GPU count of analysis.scales (tp/pp/cp and micro-batches per replica fixed; nominal = every "
                  "variability component at its median), with p50/p95; (2) each op's and each variability "
                  "component's share of the step-time variance (held at its median, the drop in variance); "
                  "(3) the median step with analysis.slow_nodes nodes analysis.slow_factor times slower, "
                  "placed in one pipeline stage or spread over stages and dp replicas; (4) days to train "
                  "train_tokens with the hardware's interruption rate, restart cost and checkpoint interval "
                  "(Monte Carlo), and the goodput. plot=PATH.png draws one figure: the step-time CDF, "
                  "slowdown versus scale, the variance shares and the slow-node placements.",
      examples=["prism variability model=llama3-70b hardware=h100-sxm gpus=65536 parallel.tp=8 parallel.pp=8 --json",
                "prism variability model=llama3-70b hardware=h100-sxm gpus=16384 parallel.tp=8 parallel.pp=8 "
                "plot=runs/variability.png",
                "prism variability model=gpt3-13b hardware=a100-sxm4-80gb gpus=512 parallel.tp=8 "
                "analysis.slow_nodes=2 analysis.slow_factor=1.2 analysis.scales=[64,512,4096]"],
      reads=Config("gpus", "plot", "models_dir", "train_tokens", "framework", "analysis"))
def _variability(command) -> int:
    from predictor.analyses.variability import AnalysisConfig, variability
    from predictor.app.plots import plot_path, variability_figure
    from predictor.app.render import format_variability
    from predictor.core.profiles import section
    cfg = load(command)
    if cfg.out:
        raise PrismError(f"out={cfg.out}: prism variability writes its figure to plot=PATH.png, "
                         "e.g. plot=variability.png", field='out')
    png = plot_path(cfg.plot)
    report = variability(*job(cfg), cfg.gpus, settings=section(cfg, "analysis", AnalysisConfig),
                         **keywords(cfg, "models_dir", "seed", "train_tokens", "framework"))
    return show_result(cfg, report, format_variability(report), png, variability_figure, 8,
                       "none (plot=variability.png draws the CDF, slowdown vs scale, variance shares and "
                       "slow-node placements)")


def split_hardware(overrides: list[str]) -> tuple[list[str] | None, list[str]]:
    """Take the ``hardware=`` overrides out of ``overrides`` (``prism compare``).

    Hydra would read ``hardware=[a,b]`` as a list of config-group options to merge into
    one profile, so the list is parsed here instead. ``hardware=[a,b]``, ``hardware=a,b``
    and repeated ``hardware=`` overrides all name several profiles.

    Returns
    -------
    names : list of str or None
        The profiles in the order given, without repeats; None where no ``hardware=`` was
        given.
    rest : list of str
        The other overrides, unchanged.
    """
    names, rest, repeated = None, [], []
    for text in overrides:
        key, sep, value = text.partition("=")
        if key.lstrip("+~") != "hardware" or not sep:
            rest.append(text)
            continue
        names = names or []
        given = listed("hardware", value)
        repeated += [n for i, n in enumerate(given) if n in names or n in given[:i]]
        names = list(dict.fromkeys([*names, *given]))
    if repeated:
        print(f"prism compare: note: {', '.join(dict.fromkeys(repeated))} named more than once, compared once",
              file=sys.stderr)
    return names, rest


@verb("compare", help="one job on several hardware profiles: step time, time, cost and energy side by side",
      description="Predict the same model, layout, GPU count and train_tokens on each profile of "
                  "hardware=[a,b,...] (default: every GPU profile in conf/hardware), each exactly as prism "
                  "predict does, and show side by side: step time p5/p50/p95 and the speed-up over the first "
                  "profile, tokens/s, MFU, memory per GPU and whether it fits, days to train, GPU-hours, cost "
                  "(GPU-hours x hardware.price_per_gpu_hour; none without a price) and energy (GPU-hours x "
                  "hardware.power_w x pue: rated GPU board power, node CPUs and network excluded; pue, default "
                  "1.0, adds cooling), each with its p5-p95 band, and the evidence each profile rests on "
                  "(measured samples, microbenchmarks or the spec-only prior). The layout is the same on "
                  "every profile. plot=PATH.png also draws the step-time CDFs and the time and cost bands.",
      examples=["prism compare model=gpt3-175b hardware=[a100-sxm4-80gb,h100-sxm,gh200,b200] gpus=1024 "
                "parallel.tp=8 parallel.pp=8",
                "prism compare model=llama3-70b gpus=512 parallel.tp=8 parallel.pp=4 train_tokens=15e12 pue=1.2"
                "   # every GPU profile",
                "prism compare model=gpt3-13b hardware=[a100-sxm4-80gb,h100-sxm] gpus=64 parallel.tp=8 "
                "plot=runs/compare.png --json"],
      settings_help="hardware=[a,b,...] (or one name): the profiles to compare, the first the speed-up's baseline; "
                     "every other key=value as in prism predict (model=, gpus=, parallel.tp=, parallel.ep=, "
                     "hardware.gemm_dtype=fp8 on every profile, train_tokens=), plus "
                     "pue=1.2 (energy overhead) and plot=PATH.png. --show-config lists every key.",
      reads=Config("gpus", "plot", "models_dir", "train_tokens", "framework", "pue"))
def _compare(command) -> int:
    from predictor.analyses.compare import check_hardware, compare
    from predictor.app.config import load_config
    from predictor.app.plots import comparison_figure, plot_path
    from predictor.app.render import format_comparison
    from predictor.core.precision import check_gemm_dtype
    from predictor.core.profiles import section
    from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig
    names, command.settings = split_hardware(command.settings)  # hardware=[a,b] is not a Hydra override
    every = names is None
    names = check_hardware(names)  # None: every GPU profile
    cfg = load(command, hardware=names)
    png = plot_path(cfg.plot)
    # each profile composed with the same overrides, so that hardware.* edits apply to every one
    profiles, left_out = [], []
    for name in names:
        try:
            hw = section(load_config([*command.settings, f"hardware={name}"]), "hardware", HardwareConfig)
            check_gemm_dtype(hw.name, hw.gemm_dtype, hw.peak_flops)
            profiles.append(hw)
        except PrismError as exc:  # hardware.gemm_dtype=fp8 over every profile: the cards without it step aside
            if not every or exc.field != "hardware.gemm_dtype":
                raise
            left_out.append(name)
    if left_out:
        if not profiles:
            raise PrismError("hardware.gemm_dtype: no GPU profile has its peak; name the profiles to compare, "
                             "e.g. hardware=[h100-sxm,b200]", field="hardware.gemm_dtype")
        print(f"prism compare: note: left out {', '.join(left_out)}, without a peak at hardware.gemm_dtype; "
              f"hardware=[...] names the profiles to compare", file=sys.stderr)
    c = compare(section(cfg, "model", ModelConfig), profiles, section(cfg, "parallel", ParallelConfig), cfg.gpus,
                **keywords(cfg, "models_dir", "seed", "train_tokens", "pue", "framework"), leave_out=every)
    return show_result(cfg, c, format_comparison(c), png, comparison_figure, 6,
                       "none (plot=compare.png draws the step-time CDFs and the time and cost bands)")


@verb("search", help="rank every parallel layout of a GPU count by predicted step time; Pareto fronts",
      description="Enumerate the layouts of exactly gpus GPUs (dp·tp·pp·cp = gpus; tp within a node, cp a "
                  "power of two, pp up to the layers, interleaved 1F1B where the layers split evenly, "
                  "micro-batches 1/2/4/8, recompute none/selective/full, sharding none/distributed optimizer/"
                  "ZeRO-3, sequence parallel with tp) at a fixed global batch (parallel.global_batch_size, or "
                  "prism predict's default), drop the invalid ones and those that do not fit in memory "
                  "(counted by reason), and rank the rest by rank_by (p50, or p90/p95 to rank by risk, or "
                  "mean) of the predicted step time. Every layout is screened with few draws; the best "
                  "(at least top) are then composed with 1000 draws as prism predict does. Shows the top "
                  "layouts and the Pareto fronts of rank_by vs memory per GPU and of p50 vs risk (p95/p50); "
                  "--json gives every ranked layout; plot=PATH.png draws both fronts.",
      examples=["prism search model=llama3-70b hardware=h100-sxm gpus=1024",
                "prism search model=llama3-70b hardware=h100-sxm gpus=1024 rank_by=p95 top=5 plot=runs/search.png",
                "prism search model=gpt3-13b hardware=a100-sxm4-80gb gpus=64 parallel.global_batch_size=512 --json",
                "prism search model=llama3-8b hardware=h100-sxm gpus=16 --json | jq '.top_layouts[0]'"],
      reads=Config("gpus", "plot", "models_dir", "framework", "rank_by", "top"))
def _search(command) -> int:
    from predictor.analyses.search import search
    from predictor.app.plots import plot_path, search_figure
    from predictor.app.render import format_search
    cfg = load(command)
    png = plot_path(cfg.plot)
    model, hardware, base = job(cfg)
    result = search(model, hardware, cfg.gpus, base=base,
                    **keywords(cfg, "rank_by", "top", "models_dir", "seed", "framework"))
    return show_result(cfg, result, format_search(result), png, search_figure, 10,
                       "none (plot=search.png draws time vs memory and p50 vs risk with the fronts)")


@verb("predict-batch", help="predict every job of a CSV table (the data/e2e layout); resumable",
      description="Predict the step time of every row (one training job) of a CSV table in the layout of\n"
                  "data/e2e/e2e_training_visible.csv and write the table to out=OUT.csv with pred_iter_time_s_p50,\n"
                  "_p5, _p95 (s), pred_mem_gib, pred_status (ok, or the column to fix), pred_fits (whether the\n"
                  "memory fits the GPU: a job that does not is still predicted), pred_hardware (the profile the\n"
                  "gpu cell was read as), pred_assumed (what blank and free-text cells were read as),\n"
                  "pred_band_basis (what the p5-p95 band rests on: runs like this one and how far they\n"
                  "measured from PRISM's median) and pred_key (row index and hash). The file and out are\n"
                  "checked before any work (bad input: one line, exit 2); no cell stops the batch. A row's\n"
                  "prediction depends on that row alone. Rows are written a chunk at a time: Ctrl-C keeps them,\n"
                  "and the same command resumes (rows that failed are tried again). A progress bar shows on a\n"
                  "terminal; elsewhere (a log) a line every 256 rows; never with --json. A table of 128 rows or\n"
                  "more is predicted by one worker process per CPU this process may use (workers=N to choose);\n"
                  "every row predicts the same in any worker.\n\n"
                  + schema_help(),
      examples=["prism predict-batch data/e2e/e2e_training_visible.csv out=predicted.csv",
                "prism predict-batch runs.csv out=runs.predicted.csv draws=1000 seed=1 --json"],
      paths=Paths(help="a CSV table, UTF-8, one job a row (columns below)"),
      reads=Plain({"out": None, "draws": None, "seed": "0", "models_dir": None, "workers": None},
                  "out=OUT.csv (required), draws=N, seed=N, models_dir=DIR, workers=N and output=json",
                  required={"out": "out=OUT.csv is required: where to write the table with the predicted columns"}),
      settings_help="out=OUT.csv (required), draws=N (Monte Carlo draws a row, default 500), seed=N, "
                    "models_dir=DIR, workers=N (processes, default: this process's CPUs), output=json (same as --json)")
def _predict_batch(command) -> int:
    from predictor.analyses.batch import DRAWS, MAX_WORKERS, PROGRESS_ROWS, default_workers, predict_batch
    from predictor.core.specs import MAX_DRAWS
    settings = read_plain(command)
    settings["draws"] = settings["draws"] or str(DRAWS)
    numbers = {}
    for key, low, high in (("draws", 1, MAX_DRAWS), ("seed", 0, MAX_DRAWS), ("workers", 1, MAX_WORKERS)):
        if key == "workers" and settings[key] is None:
            numbers[key] = None
            continue
        try:
            numbers[key] = int(settings[key])
        except ValueError:
            numbers[key] = -1
        if not low <= numbers[key] <= high:
            raise PrismError(f"{key}={settings[key]}: give a whole number from {low} to {high:,}", field=key)
    done = predict_batch(command.path, settings["out"], draws=numbers["draws"], seed=numbers["seed"],
                         workers=numbers["workers"] or default_workers(),
                         models_root=settings["models_dir"], progress=sys.stderr.isatty() and not settings["json"],
                         progress_every=0 if sys.stderr.isatty() or settings["json"] else PROGRESS_ROWS)
    print(as_json(asdict(done)) if settings["json"] else done.format())
    if done.status == "interrupted":
        return 130
    if done.rows and not done.predicted:  # a whole-table problem: say so in the exit status too
        print(f"prism predict-batch: error: none of the {done.rows} rows was predicted; each row's reason is in "
              f"the status column of {done.out}", file=sys.stderr)
        return 2
    return 0

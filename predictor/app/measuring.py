"""The verbs of measured training steps: ``prism measure`` (train the reference workload
under torchrun and time every step; torch is imported only when it runs), and the verbs that
score predictions against measured steps, ``prism validate`` and ``prism calibrate``."""
from __future__ import annotations

from predictor.app.output import as_json, show, show_result
from predictor.app.settings import Config, check_seed, load
from predictor.app.training import sampling_module
from predictor.app.verbs import verb
from predictor.core.errors import PrismError
from predictor.core.files import writable


@verb("measure", help="train the reference workload under torchrun and record every step's time",
      description="Train the model with PyTorch's own parallelism (DDP or FSDP2 for dp, DTensor "
                  "tensor parallel for tp, torch.distributed.pipelining 1F1B / GPipe for pp; gloo on "
                  "CPU, NCCL on CUDA), skip measure.warmup steps, and time measure.steps steps on "
                  "every rank. The rows (one per step and rank, with the full layout) go to out=FILE; "
                  "layouts already in the file are kept, a layout measured again is replaced.",
      examples=["prism measure model=tiny parallel.dp=2 measure.steps=30 out=runs/measured.parquet",
                "prism measure model=small parallel.pp=2 parallel.global_batch_size=8 out=runs/measured.parquet",
                "prism measure model=tiny parallel.tp=2 parallel.recompute=full out=runs/measured.parquet"],
      reads=Config("gpus", "out"))
def _measure(command) -> int:
    cfg = load(command)
    report = sampling_module("measure", "sampling.measure").measure(cfg, progress=cfg.output != "json")
    show(cfg, report.to_dict(), report.format())
    return 0


def _measured(cfg):
    """The hardware and measured rows of a verb that reads ``measured=FILE``."""
    from predictor.core.profiles import section
    from predictor.core.specs import HardwareConfig
    from predictor.data.measurements import measured_on, read_measurements
    if not cfg.measured:
        raise PrismError("measured=FILE.parquet is required: a file written by `prism measure` (or, for validate, "
                         "published=TABLE.csv: a table of published runs)", field="measured")
    hw, frame = section(cfg, "hardware", HardwareConfig), read_measurements(cfg.measured)
    measured_on(frame, hw)  # before its models are looked for
    return hw, frame


def _validate_published(cfg) -> int:
    """``prism validate published=TABLE.csv``: published runs against their predictive intervals."""
    import pandas as pd

    from predictor.analyses.validate import validate_published
    from predictor.app.plots import plot_path, reliability_figure
    from predictor.app.render import format_published_validation
    from predictor.data.published import measured_step_s
    from predictor.data.runs_table import read_table
    png, seed = plot_path(cfg.plot), check_seed(cfg)
    table = read_table(cfg.published)
    rows = pd.DataFrame(table.rows, columns=[h.strip().lower() for h in table.header])
    # the figures a measured step is worked out from, as numbers (a bad cell: no step)
    numbers = rows.assign(**{c: pd.to_numeric(rows[c], errors="coerce") for c in
                             ("iter_time_s", "iter_time_s_derived", "tflops_per_gpu", "num_gpus", "gbs", "seq_len")
                             if c in rows})
    measured = []
    for _, row in numbers.iterrows():
        try:
            measured.append(measured_step_s(row))
        except (PrismError, ValueError, TypeError):
            measured.append(float("nan"))
    rows["measured_s"] = pd.to_numeric(pd.Series(measured), errors="coerce")
    with_step = rows[rows.measured_s > 0]
    if with_step.empty:
        raise PrismError(f"published={cfg.published}: no row states a measured step (iter_time_s, "
                         f"iter_time_s_derived, or tflops_per_gpu of a known source); add one", field="published")
    source = with_step["set_id"] if "set_id" in with_step else "table"
    result = validate_published(with_step.assign(source=source), seed=seed)
    if len(with_step) < len(rows):
        result.skipped["no measured step"] = int(len(rows) - len(with_step))
    return show_result(cfg, result, format_published_validation(result), png, reliability_figure, 13,
                       "none (plot=reliability.png draws the reliability diagram and the PIT histogram)")


@verb("validate", help="score predicted step-time distributions against measured ones",
      description="For every layout of a `prism measure` file, predict the step-time distribution "
                  "on the given hardware and compare it with the measured steps (the slowest rank "
                  "of each): absolute % error of the median and of p95, Kolmogorov-Smirnov "
                  "distance, coverage of the predicted 80% interval. Draws a PNG of predicted vs "
                  "measured CDFs (out=PNG, default beside the measured file).",
      examples=["prism validate measured=runs/measured.parquet hardware=local-cpu",
                "prism validate measured=runs/measured.parquet hardware=local-cpu --json",
                "prism validate measured=runs/measured.parquet models_dir=runs/models out=runs/cdf.png"],
      reads=Config("measured", "published", "plot", "out", "models_dir"))
def _validate(command) -> int:
    from predictor.analyses.validate import validate
    from predictor.app.plots import cdf_figure, default_plot_path, plot_path, save_figure
    from predictor.app.render import format_validation
    from predictor.latency.artifacts import trained_models
    cfg = load(command)
    # the two inputs are scored apart, each reading its own settings: one the other reads would go unheard
    unread = {"measured": "validate scores one input at a time; run it once for each",
              "out": "published= draws its figure to plot=PATH.png",
              "models_dir": "published runs are scored with the shipped models, on which their predictive "
                            "uncertainty was learned; drop it"} if cfg.published else \
        {"plot": "measured= draws its CDF to out=PATH.png (default: beside the measured file)"}
    for key, why in unread.items():
        if cfg.get(key):
            raise PrismError(f"{key}={cfg[key]}: not read with {'published' if cfg.published else 'measured'}=; "
                             f"{why}", field=key)
    if cfg.published:
        return _validate_published(cfg)
    seed = check_seed(cfg)
    hw, frame = _measured(cfg)
    png = plot_path(cfg.out, "out") if cfg.out else default_plot_path(cfg.measured, ".cdf.png", "out")
    models = trained_models(hw, cfg.models_dir)
    result = validate(frame, hw, models, seed=seed)
    save_figure(cdf_figure(result), png)
    if cfg.output == "json":
        print(as_json([s.to_dict() for s in result.scores]))
    else:
        cal = models.calibration if models else None
        print(format_validation(result) + f"\nCDF plot     {png}\ncalibration  "
              + (f"{cal}" if cal else "none (operator samples alone; see prism calibrate)"))
    return 0


@verb("calibrate", help="fit the in-situ calibration of a hardware's models to measured steps",
      description="Operators timed alone miss what a training step adds around them (framework "
                  "time per call, DTensor dispatch under tp, caches shared with neighbours). Fit "
                  "compute_scale, op_overhead_us and tp_overhead_us to the measured layouts of a "
                  "`prism measure` file, store them in the models' manifest, and report how well "
                  "each layout is predicted by a calibration fitted on the other layouts only.",
      examples=["prism calibrate measured=runs/measured.parquet hardware=local-cpu models_dir=runs/models",
                "prism calibrate measured=runs/suite/measured.parquet models_dir=runs/suite/models --json"],
      reads=Config("measured", "models_dir"))
def _calibrate(command) -> int:
    from predictor.analyses.calibrate import cross_validate, fit_calibration
    from predictor.analyses.validate import validate
    from predictor.app.render import format_validation
    from predictor.latency.artifacts import ModelSet, models_dir
    cfg = load(command)
    if not cfg.models_dir:  # prism train's rule: only a deliberate models_dir=models changes the shipped set
        raise PrismError("models_dir: unset; prism calibrate stores its fit in the manifest of the models it "
                         "calibrates, so name them: models_dir=runs/models (where prism train writes) or "
                         "models_dir=models (the shipped set, tracked by git)", field="models_dir")
    seed = check_seed(cfg)
    hw, frame = _measured(cfg)
    directory = models_dir(cfg.models_dir) / hw.name
    models = ModelSet.load(directory, hw)
    writable("models_dir", directory, folder=True)  # its manifest takes the fit: found out before fitting
    models.manifest.pop("calibration", None)  # fit against the operator samples alone
    cal = fit_calibration(frame, hw, models)
    held_out = validate(frame, hw, models, seed=seed,
                        calibrations=cross_validate(frame, hw, models, start=cal))
    models.save_calibration(directory, cal)
    payload = {"calibration": cal.to_dict(), "stored_in": str(directory), "leave_one_out": held_out.summary(),
               "layouts": [s.to_dict() for s in held_out.scores]}
    show(cfg, payload, "each layout predicted with a calibration fitted on the others (leave one out):\n"
           + format_validation(held_out) + f"\n\nfitted on all {cal.layouts} layouts: {cal}\nstored in   "
           f"{directory}/manifest.json (every prediction on {hw.name} with these models uses it)")
    return 0

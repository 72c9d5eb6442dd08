"""``prism <verb> [key=value ...]``: the command line.

Each verb composes ``conf/`` with Hydra overrides, turns the configuration into the typed
specs and settings its analysis takes (:mod:`predictor.core.specs`), calls it and prints
the result as a table (default, :mod:`predictor.app.render`) or JSON (``--json`` or
``output=json``); ``plot=`` draws it (:mod:`predictor.app.plots`). Bad input ends with one line
naming the field and the fix, and exit code 2. Verbs that measure (``sample``) import
the torch-based :mod:`sampling` package only when they run, so ``predictor`` itself
never imports torch.
"""
from __future__ import annotations

import argparse
import errno
import json
import math
import os
import signal
import sys
from dataclasses import asdict
from importlib import import_module

from predictor.core.errors import PrismError
from predictor.core.files import writable
from predictor.core.specs import check_number
from predictor.data.runs_table import schema_help

#: Shapes below which a trained model is reported as thin (prism train's note).
FEW_SHAPES = 4
#: What ``output=`` can print.
OUTPUTS = ("table", "json")
_OVERRIDES_HELP = ("Hydra overrides, key=value: choose a config group (hardware=h100-sxm, "
                   "model=llama3-8b, sampling=quick) or set any key (sampling.budget_s=60, "
                   "parallel.tp=8, parallel.ep=8 for Mixture-of-Experts, hardware.gemm_dtype=fp8 (or nvfp4 on "
                   "Blackwell) for the GEMMs' precision, sampling.ops=[gemm,attention]). --show-config lists every "
                   "key.")


#: The top-level settings only some verbs read, by verb (output, seed and the config groups are
#: not checked). Given to a verb that does not read it, a setting is refused: `prism search
#: confidence=0.95` would otherwise rank by p50 as if it were heard.
VERB_SETTINGS = {
    "predict": {"gpus", "plot", "models_dir", "train_tokens", "framework", "target_step_s", "confidence",
                "sample_if_missing"},
    "variability": {"gpus", "plot", "models_dir", "train_tokens", "framework", "analysis"},
    "compare": {"gpus", "plot", "models_dir", "train_tokens", "framework", "pue"},
    "search": {"gpus", "plot", "models_dir", "framework", "rank_by", "top"},
    "train": {"samples", "models_dir", "fit_variability"},
    "evaluate": {"samples", "models_dir", "by"},
    "sample": {"output_dir"},
    "measure": {"gpus", "out"},
    "validate": {"measured", "published", "plot", "out", "models_dir"},
    "calibrate": {"measured", "models_dir"},
}
_SOME_VERBS = set().union(*VERB_SETTINGS.values())
#: The top-level settings that name a file or folder, each with an example.
PATH_SETTINGS = {"samples": "samples=samples/cpu", "models_dir": "models_dir=runs/models",
                 "measured": "measured=runs/measured.parquet", "published": "published=runs.csv",
                 "out": "out=runs/measured.parquet", "output_dir": "output_dir=samples/cpu", "plot": "plot=step.png"}


def _check_verb_settings(verb: str, settings) -> None:
    """Refuse a setting ``verb`` does not read (:data:`VERB_SETTINGS`), naming the verbs that do;
    ``settings`` are the command line's, as :func:`predictor.app.config.compose` read them."""
    for setting in settings:
        key, text = setting.key.split(".")[0], setting.text
        if key in _SOME_VERBS and key not in VERB_SETTINGS[verb]:
            readers = [f"prism {v}" for v, keys in VERB_SETTINGS.items() if key in keys]
            raise PrismError(f"{text}: prism {verb} does not read {key} ({', '.join(readers)} "
                             f"{'reads' if len(readers) == 1 else 'read'} it); drop it", field=key)


def _load(args, hardware: list[str] | None = None):
    """The checked configuration of ``args``; ``--show-config`` prints it and exits, composed once
    per profile of ``hardware`` where given (prism compare runs each, not the default one)."""
    from predictor.app.config import check_keys, compose
    overrides = list(args.overrides)
    if args.json and "output=json" not in overrides:
        overrides.append("output=json")
    composition = compose(overrides)
    if args.show_config:
        shown = [composition] if hardware is None else [compose([*overrides, f"hardware={h}"]) for h in hardware]
        if composition.cfg.get("output") == "json":  # a script's --json: the values, without conf/'s comments
            from omegaconf import OmegaConf
            values = [OmegaConf.to_container(c.cfg, resolve=True) for c in shown]
            print(_json(values[0] if hardware is None else values))  # compare's: a list, one a profile
        else:
            from predictor.app.config_text import show_config
            for i, (name, c) in enumerate(zip(hardware or [None], shown)):
                head = "" if name is None else f"# prism compare: profile {i + 1} of {len(shown)}, hardware={name}\n"
                print(("\n" if i else "") + head + show_config(c), end="")
        raise SystemExit(0)
    check_keys(composition)
    _check_verb_settings(args.verb, composition.overrides)
    _paths_as_typed(composition)
    if composition.cfg.get("output", "table") not in OUTPUTS:
        raise PrismError(f"output={composition.cfg.output}: choose {' or '.join(OUTPUTS)} (--json is output=json)",
                         field="output")
    return composition.cfg


def _paths_as_typed(composition) -> None:
    """A path setting as the text typed: Hydra reads ``models_dir=2024`` as a number, which
    no path function takes. ``plot=true`` (a switch, not a file) and ``plot=[a]`` (written
    as ``['a'].png``) are refused."""
    for setting in composition.overrides:
        if setting.key not in PATH_SETTINGS or setting.value is None or isinstance(setting.value, str):
            continue
        if isinstance(setting.value, bool | list | dict):
            raise PrismError(f"{setting.text}: {setting.key} takes one path, e.g. {PATH_SETTINGS[setting.key]}",
                             field=setting.key)
        composition.cfg[setting.key] = setting.text.partition("=")[2]


def _json(payload) -> str:
    """``payload`` as JSON, indented for a terminal and compact for a pipe or file (C's encoder:
    a search's thousands of layouts print in a tenth of the time); NaN and infinity are not
    JSON: one error naming where, never an invalid document."""
    try:
        return json.dumps(payload, indent=2 if sys.stdout.isatty() else None, default=str, allow_nan=False)
    except ValueError:
        where = _non_finite(payload)
        raise PrismError(f"{where}: not a finite number, so there is no valid JSON to print; an input is out of "
                         f"range: check the model, hardware and layout values", field=where) from None


def _print(cfg, payload, table: str) -> None:
    print(_json(payload) if cfg.output == "json" else table)


def _non_finite(value, where: str = "result") -> str | None:
    """The path (``result.step_time_s.p50``) of the first NaN or infinity in ``value``."""
    if isinstance(value, float):
        return None if math.isfinite(value) else where
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list | tuple) else ()
    for key, item in items:
        found = _non_finite(item, f"{where}.{key}" if isinstance(value, dict) else f"{where}[{key}]")
        if found:
            return found
    return None


def _report(cfg, result, text: str, png, figure, width: int, hint: str) -> int:
    """Print a verb's ``result``, as JSON or as ``text`` and a ``plot`` line aligned to its
    table's labels (``width``), after saving ``figure(result)`` to ``png`` where asked;
    ``hint`` says what ``plot=`` would draw."""
    from predictor.app.plots import save_figure
    if png:
        save_figure(figure(result), png)
    plot = str(png) if png else None
    _print(cfg, result.to_dict() | {"plot": plot}, f"{text}\n{'plot':<{width}}{plot or hint}")
    return 0


def _job(cfg):
    """The model, hardware and parallel layout of a composed configuration, checked."""
    from predictor.core.profiles import section
    from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig
    return (section(cfg, "model", ModelConfig), section(cfg, "hardware", HardwareConfig),
            section(cfg, "parallel", ParallelConfig))


def _settings(cfg, *keys) -> dict:
    """The top-level settings ``keys`` of ``cfg`` as keyword arguments of an analysis; a
    setting left null keeps the analysis' default."""
    return {key: cfg[key] for key in keys if cfg.get(key) is not None}


def _seed(cfg) -> int:
    """``seed``, checked before any work: validate and calibrate read it after minutes of it."""
    check_number("seed", cfg.seed, integer=True, zero=True)
    return cfg.seed


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
        given = listed_names(value)
        repeated += [n for i, n in enumerate(given) if n in names or n in given[:i]]
        names = list(dict.fromkeys([*names, *given]))
    if repeated:
        print(f"prism compare: note: {', '.join(dict.fromkeys(repeated))} named more than once, compared once",
              file=sys.stderr)
    return names, rest


def hardware_names(value: str) -> list[str]:
    """The profiles a ``hardware=`` value names: ``[a,b]`` or ``a,b``, without repeats."""
    return list(dict.fromkeys(listed_names(value)))


def listed_names(value: str) -> list[str]:
    """The names of a ``hardware=`` value as written, repeats included."""
    value = value.strip()
    if value.startswith("[") != value.endswith("]"):  # a bracket lost in the shell, or a typo
        raise PrismError(f"hardware={value}: an unclosed bracket; write hardware=[a,b] or hardware=a,b (quoted in "
                         f"the shell: 'hardware=[a,b]')", field="hardware")
    names = [n.strip().strip("'\"") for n in value.removeprefix("[").removesuffix("]").split(",")]
    return [n for n in names if n]


def _measuring(verb: str, module: str):
    """A torch-based module of :mod:`sampling`, imported only when a measuring verb runs."""
    try:
        return import_module(module)
    except ImportError as exc:
        raise PrismError(f"prism {verb} needs torch ({exc}); install the measuring extra: "
                         f"pip install -e '.[sampling]'") from None


def _sample(args) -> int:
    cfg = _load(args)
    runner = _measuring("sample", "sampling.runner")
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
    _print(cfg, asdict(report), "\n".join(lines))
    return 130 if report.status == "interrupted" else 1 if report.status == "incomplete" else 0


def _samples(args) -> int:
    from predictor.data.store import no_runs
    from predictor.data.summary import summarize
    key, sep, value = args.path.partition("=")
    if sep and key == "samples" and not os.path.exists(args.path):  # train's way of naming a store
        raise PrismError(f"{args.path}: prism samples takes the folder itself: prism samples {value}", field='path')
    table = summarize(args.path)
    if not len(table):  # an error, as prism train's of the same store: a script must not read it as a summary
        raise PrismError(f"{args.path}: no samples; {no_runs(args.path)}", field='path')
    if args.json:
        print(table.to_json(orient="records", indent=2))
    else:
        print(table.to_string(index=False))
        if table.unusable_rows.sum():
            print(f"note: {int(table.unusable_rows.sum())} rows have a latency that is not a positive number; "
                  f"prism train refuses them: drop those rows or sample again")
    return 0


def _importer_settings(args, verb: str, defaults: dict, usage: str, example: str) -> dict:
    """The key=value settings of an import verb (not Hydra keys: importers compose no
    configuration): ``out`` is required, ``output=json`` is the same as --json."""
    settings = dict(defaults)
    for text in args.overrides:
        key, sep, value = text.partition("=")
        if not sep or not value or key not in ("out", "output", *defaults):
            raise PrismError(f"{text!r}: {verb} takes {usage}", field=str(text))
        if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"":  # quoted as the Hydra verbs ask
            value = value[1:-1]
        settings[key] = value
    if "out" not in settings:
        raise PrismError(f"out=DIR is required: the sample store to write into, e.g. {example}", field='out')
    if settings.get("output", "table") not in OUTPUTS:
        raise PrismError(f"output={settings['output']}: choose {' or '.join(OUTPUTS)} (--json is output=json)",
                         field="output")
    settings["json"] = args.json or settings.get("output") == "json"
    return settings


def _print_reports(reports, as_json: bool) -> None:
    """One import report, or a list of them, as JSON (the same shape) or as tables."""
    many = reports if isinstance(reports, list) else [reports]
    if as_json:
        payload = [asdict(r) for r in many]
        print(_json(payload if isinstance(reports, list) else payload[0]))
    else:
        print("\n".join(r.table() for r in many))


def _import_ett(args) -> int:
    from predictor.data.importers.ett import import_ett
    settings = _importer_settings(args, "import-ett", {}, "out=DIR (required) and output=json|table",
                                  "out=samples/ett")
    _print_reports(import_ett(args.path, settings["out"]), settings["json"])
    return 0


def _import_trace(args) -> int:
    from predictor.data.importers.trace import import_trace
    # FILE... and key=value share the command line: a token with "=" that is no file is a setting
    args.overrides = [t for t in args.path if "=" in t and not os.path.exists(t)]  # False, not OSError: out=<long>
    files = [t for t in args.path if t not in args.overrides]
    settings = _importer_settings(args, "import-trace", {"hardware": None, "profiler_cost_us": None},
                                  "FILE... out=DIR (required), hardware=NAME, profiler_cost_us=US and "
                                  "output=json|table", "out=samples/trace")
    cost = settings["profiler_cost_us"]
    try:
        cost = None if cost is None else float(cost)
    except ValueError:
        raise PrismError(f"profiler_cost_us={cost}: give the microseconds (>= 0) one recorded event costs, e.g. 0.5",
                         field="profiler_cost_us") from None
    report = import_trace(files, settings["out"], settings["hardware"], cost, progress=sys.stderr.isatty())
    _print_reports(report, settings["json"])
    return 0


def _import_microbench(args) -> int:
    from predictor.data.importers.microbench import SOURCES, check_target, import_microbench
    settings = _importer_settings(args, "import-microbench", {"hardware": ",".join(SOURCES)},
                                  "out=DIR (required), hardware=NAME[,NAME] and output=json|table",
                                  "out=samples/microbench")
    names = hardware_names(settings["hardware"])  # hardware=b200,b200 is one run
    for name in names:
        check_target(name, settings["out"])
    reports = [import_microbench(args.path, h, settings["out"]) for h in names]
    _print_reports(reports, settings["json"])
    return 0


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


def _train(args) -> int:
    import time

    from predictor.app.config import shell_setting
    from predictor.core.profiles import section
    from predictor.core.specs import RegressorConfig
    from predictor.data.store import thread_counts
    from predictor.latency.artifacts import TRAINED_MODELS, check_replaceable, train
    from predictor.latency.variability_fit import fit_variability
    cfg = _load(args)
    hw, samples = _hardware_and_samples(cfg)
    rc = section(cfg, "regressor", RegressorConfig)
    fit = _flag(cfg, "fit_variability")
    root = writable("models_dir", cfg.models_dir or TRAINED_MODELS, folder=True)  # the shipped models/ when unnamed
    check_replaceable(root / hw.name)  # before the fit, not after it
    t0 = time.perf_counter()
    models = train(samples, hw, rc, n_jobs=2)
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
    _print(cfg, {"hardware": hw.name, "models_dir": str(root), "folder": str(directory), "seconds": elapsed,
                 "models": rows, "few_shapes": thin,
                 "variability": models.variability.to_dict() if models.variability else None,
                 "predict": use, "replaced": models.replaced}, table)
    return 0


def _evaluate(args) -> int:
    from predictor.latency.artifacts import ModelSet, models_dir
    from predictor.latency.evaluate import evaluate, trained_on
    cfg = _load(args)
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
    _print(cfg, [r | {"in_sample": in_sample} for r in result.to_dict(orient="records")], table)
    return 0


def _predict(args) -> int:
    from predictor.analyses.predict import predict
    from predictor.app.plots import plot_path, prediction_figure
    from predictor.app.render import format_prediction
    cfg = _load(args)
    png = plot_path(cfg.plot)
    job = _job(cfg)
    if _flag(cfg, "sample_if_missing"):
        cfg.models_dir = _sample_this_machine(job[1], cfg.models_dir)
    p = predict(*job, cfg.gpus,
                **_settings(cfg, "models_dir", "seed", "train_tokens", "target_step_s", "confidence", "framework"))
    given = {text.partition("=")[0].lstrip("+~") for text in args.overrides}
    if "hardware" not in given:
        p.notes.append(f"hardware={p.hardware}, the default (no hardware= given); for a GPU job name its profile, "
                       f"e.g. hardware=h100-sxm")
    return _report(cfg, p, format_prediction(p), png, prediction_figure, 16,
                   "none (plot=predict.png draws the step-time CDF and the critical path)")


def _flag(cfg, key: str) -> bool:
    """A true/false setting, or one error naming it (a typo must not read as true)."""
    value = cfg[key]
    if not isinstance(value, bool):
        raise PrismError(f"{key}={value}: give true or false", field=key)
    return value


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
    for name, verb in (("sample", [f"hardware={hardware.name}", "sampling=quick", f"output_dir={samples}"]),
                       ("train", [f"samples={samples}", f"hardware={hardware.name}", f"models_dir={TRAINED_MODELS}"])):
        print(f"sample_if_missing: prism {name} {' '.join(verb)}", file=sys.stderr, flush=True)
        if subprocess.run([sys.executable, "-m", "predictor.app.cli", name, *verb]).returncode:
            raise PrismError(f"sample_if_missing: prism {name} failed (above); run it yourself to see why",
                             field="sample_if_missing")
    return str(TRAINED_MODELS)


def _variability(args) -> int:
    from predictor.analyses.variability import AnalysisConfig, variability
    from predictor.app.plots import plot_path, variability_figure
    from predictor.app.render import format_variability
    from predictor.core.profiles import section
    cfg = _load(args)
    if cfg.out:
        raise PrismError(f"out={cfg.out}: prism variability writes its figure to plot=PATH.png, "
                         "e.g. plot=variability.png", field='out')
    png = plot_path(cfg.plot)
    report = variability(*_job(cfg), cfg.gpus, settings=section(cfg, "analysis", AnalysisConfig),
                         **_settings(cfg, "models_dir", "seed", "train_tokens", "framework"))
    return _report(cfg, report, format_variability(report), png, variability_figure, 8,
                   "none (plot=variability.png draws the CDF, slowdown vs scale, variance shares and "
                   "slow-node placements)")


def _compare(args) -> int:
    from predictor.analyses.compare import check_hardware, compare
    from predictor.app.config import load_config
    from predictor.app.plots import comparison_figure, plot_path
    from predictor.app.render import format_comparison
    from predictor.core.precision import check_gemm_dtype
    from predictor.core.profiles import section
    from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig
    names, args.overrides = split_hardware(args.overrides)  # hardware=[a,b] is not a Hydra override
    every = names is None
    names = check_hardware(names)  # None: every GPU profile
    cfg = _load(args, hardware=names)
    png = plot_path(cfg.plot)
    # each profile composed with the same overrides, so that hardware.* edits apply to every one
    profiles, left_out = [], []
    for name in names:
        try:
            hw = section(load_config([*args.overrides, f"hardware={name}"]), "hardware", HardwareConfig)
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
                **_settings(cfg, "models_dir", "seed", "train_tokens", "pue", "framework"), leave_out=every)
    return _report(cfg, c, format_comparison(c), png, comparison_figure, 6,
                   "none (plot=compare.png draws the step-time CDFs and the time and cost bands)")


def _search(args) -> int:
    from predictor.analyses.search import search
    from predictor.app.plots import plot_path, search_figure
    from predictor.app.render import format_search
    cfg = _load(args)
    png = plot_path(cfg.plot)
    model, hardware, base = _job(cfg)
    result = search(model, hardware, cfg.gpus, base=base,
                    **_settings(cfg, "rank_by", "top", "models_dir", "seed", "framework"))
    return _report(cfg, result, format_search(result), png, search_figure, 10,
                   "none (plot=search.png draws time vs memory and p50 vs risk with the fronts)")


def _predict_batch(args) -> int:
    from predictor.analyses.batch import DRAWS, predict_batch
    from predictor.core.specs import MAX_DRAWS
    settings = {"out": None, "draws": str(DRAWS), "seed": "0", "models_dir": None, "output": None}
    for text in args.overrides:
        key, sep, value = text.partition("=")
        if not sep or key not in settings:
            raise PrismError(f"{text!r}: predict-batch takes out=OUT.csv (required), draws=N, seed=N, "
                             f"models_dir=DIR and output=json", field=str(text))
        settings[key] = value
    if not settings["out"]:
        raise PrismError("out=OUT.csv is required: where to write the table with the predicted columns", field="out")
    if settings["output"] not in (None, *OUTPUTS):
        raise PrismError(f"output={settings['output']}: choose {' or '.join(OUTPUTS)} (--json is output=json)",
                         field="output")
    numbers = {}
    for key, low in (("draws", 1), ("seed", 0)):
        try:
            numbers[key] = int(settings[key])
        except ValueError:
            numbers[key] = -1
        if not low <= numbers[key] <= MAX_DRAWS:
            raise PrismError(f"{key}={settings[key]}: give a whole number from {low} to {MAX_DRAWS:,}", field=key)
    as_json = args.json or settings["output"] == "json"
    report = predict_batch(args.path, settings["out"], draws=numbers["draws"], seed=numbers["seed"],
                           models_root=settings["models_dir"], progress=sys.stderr.isatty() and not as_json)
    print(_json(asdict(report)) if as_json else report.format())
    if report.status == "interrupted":
        return 130
    if report.rows and not report.predicted:  # a whole-table problem: say so in the exit status too
        print(f"prism predict-batch: error: none of the {report.rows} rows was predicted; each row's reason is in "
              f"the status column of {report.out}", file=sys.stderr)
        return 2
    return 0


def _measure(args) -> int:
    cfg = _load(args)
    report = _measuring("measure", "sampling.measure").measure(cfg, progress=cfg.output != "json")
    _print(cfg, report.to_dict(), report.format())
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
    png, seed = plot_path(cfg.plot), _seed(cfg)
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
    return _report(cfg, result, format_published_validation(result), png, reliability_figure, 13,
                   "none (plot=reliability.png draws the reliability diagram and the PIT histogram)")


def _validate(args) -> int:
    from predictor.analyses.validate import validate
    from predictor.app.plots import cdf_figure, default_plot_path, plot_path, save_figure
    from predictor.app.render import format_validation
    from predictor.latency.artifacts import trained_models
    cfg = _load(args)
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
    seed = _seed(cfg)
    hw, frame = _measured(cfg)
    png = plot_path(cfg.out, "out") if cfg.out else default_plot_path(cfg.measured, ".cdf.png", "out")
    models = trained_models(hw, cfg.models_dir)
    result = validate(frame, hw, models, seed=seed)
    save_figure(cdf_figure(result), png)
    if cfg.output == "json":
        print(_json([s.to_dict() for s in result.scores]))
    else:
        cal = models.calibration if models else None
        print(format_validation(result) + f"\nCDF plot     {png}\ncalibration  "
              + (f"{cal}" if cal else "none (operator samples alone; see prism calibrate)"))
    return 0


def _calibrate(args) -> int:
    from predictor.analyses.calibrate import cross_validate, fit_calibration
    from predictor.analyses.validate import validate
    from predictor.app.render import format_validation
    from predictor.latency.artifacts import ModelSet, models_dir
    cfg = _load(args)
    if not cfg.models_dir:  # prism train's rule: only a deliberate models_dir=models changes the shipped set
        raise PrismError("models_dir: unset; prism calibrate stores its fit in the manifest of the models it "
                         "calibrates, so name them: models_dir=runs/models (where prism train writes) or "
                         "models_dir=models (the shipped set, tracked by git)", field="models_dir")
    seed = _seed(cfg)
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
    _print(cfg, payload, "each layout predicted with a calibration fitted on the others (leave one out):\n"
           + format_validation(held_out) + f"\n\nfitted on all {cal.layouts} layouts: {cal}\nstored in   "
           f"{directory}/manifest.json (every prediction on {hw.name} with these models uses it)")
    return 0


def pd_table(rows: list[dict]) -> str:
    import pandas as pd
    return pd.DataFrame(rows).to_string(index=False)


VERBS = {
    "sample": dict(
        run=_sample, help="measure operator latencies on this machine into the sample store",
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
                  "sampling=cluster output_dir=samples/cluster   # one node, 8 ranks"]),
    "train": dict(
        run=_train, help="train the latency-distribution models of one hardware from samples",
        description="Fit one multi-quantile XGBoost model per (op, pass) present in the samples "
                    "for the hardware, on log(latency / roofline floor), with conformally "
                    "calibrated intervals; also fit the per-step variability the samples show into "
                    "variability.json, which predictions then use instead of the profile's cited figures: the "
                    "machine's speed drift from compute shapes timed in rounds (temporal), what collective sizes "
                    "timed in one round share (regime), the spread between ranks of a cluster job (spatial); "
                    "fit_variability=false keeps the cited ones; write "
                    "<models_dir>/<hardware>/<op>__<pass>.ubj.gz, variability.json and "
                    "manifest.json as a whole (a temporary folder renamed into place). models_dir defaults "
                    "to runs/models, not the shipped models/ (prism predict's default): predict with the "
                    "new models by passing the same models_dir=.",
        examples=["prism train samples=samples/ett hardware=a100-sxm4-80gb     # into runs/models/a100-sxm4-80gb",
                  "prism predict model=gpt3-13b hardware=a100-sxm4-80gb gpus=64 models_dir=runs/models",
                  "prism train samples=samples/cpu regressor.params.n_estimators=300 models_dir=/tmp/models",
                  "prism train samples=samples/cpu hardware=local-cpu models_dir=models   # replace the shipped set"]),
    "evaluate": dict(
        run=_evaluate, help="score trained models on a sample store (MAPE, pinball, coverage)",
        description="Per op and pass (collectives: per topology, nodes x ranks per node, with the network "
                    "their models were trained on; a cluster's own samples describe its own network): the "
                    "median's MAPE against each shape's measured median, the pinball loss on "
                    "log latency, and the coverage of the 80% and 90% intervals. by=origin "
                    "groups by where rows came from instead (e.g. ETT's functions).",
        examples=["prism evaluate samples=samples/ett hardware=a100-sxm4-80gb --json",
                  "prism evaluate samples=samples/ett hardware=a100-sxm4-80gb by=origin"]),
    "predict": dict(
        run=_predict, help="predict the step-time distribution, throughput, memory, time and cost to train",
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
                  "confidence=0.95"]),
    "variability": dict(
        run=_variability, help="slowdown risk versus scale, what drives the spread, where slow nodes hurt, goodput",
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
                  "analysis.slow_nodes=2 analysis.slow_factor=1.2 analysis.scales=[64,512,4096]"]),
    "compare": dict(
        run=_compare, help="one job on several hardware profiles: step time, time, cost and energy side by side",
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
        overrides_help="hardware=[a,b,...] (or one name): the profiles to compare, the first the speed-up's baseline; "
                       "every other key=value as in prism predict (model=, gpus=, parallel.tp=, parallel.ep=, "
                       "hardware.gemm_dtype=fp8 on every profile, train_tokens=), plus "
                       "pue=1.2 (energy overhead) and plot=PATH.png. --show-config lists every key."),
    "search": dict(
        run=_search, help="rank every parallel layout of a GPU count by predicted step time; Pareto fronts",
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
                  "prism search model=llama3-8b hardware=h100-sxm gpus=16 --json | jq '.top_layouts[0]'"]),
    "predict-batch": dict(
        run=_predict_batch, help="predict every job of a CSV table (the data/e2e layout); resumable",
        description="Predict the step time of every row (one training job) of a CSV table in the layout of\n"
                    "data/e2e/e2e_training_visible.csv and write the table to out=OUT.csv with pred_iter_time_s_p50,\n"
                    "_p5, _p95 (s), pred_mem_gib, pred_status (ok, or the column to fix), pred_fits (whether the\n"
                    "memory fits the GPU: a job that does not is still predicted), pred_hardware (the profile the\n"
                    "gpu cell was read as), pred_assumed (what blank and free-text cells were read as) and\n"
                    "pred_key (row index and hash). The file and out are\n"
                    "checked before any work (bad input: one line, exit 2); no cell stops the batch. A row's\n"
                    "prediction depends on that row alone. Rows are written a chunk at a time: Ctrl-C keeps them,\n"
                    "and the same command resumes (rows that failed are tried again). A progress bar shows on a\n"
                    "terminal, never with --json.\n\n"
                    + schema_help(),
        examples=["prism predict-batch data/e2e/e2e_training_visible.csv out=predicted.csv",
                  "prism predict-batch runs.csv out=runs.predicted.csv draws=1000 seed=1 --json"],
        positional="path", positional_help="a CSV table, UTF-8, one job a row (columns below)", overrides=True,
        overrides_help="out=OUT.csv (required), draws=N (Monte Carlo draws a row, default 500), seed=N, "
                       "models_dir=DIR, output=json (same as --json)"),
    "measure": dict(
        run=_measure, help="train the reference workload under torchrun and record every step's time",
        description="Train the model with PyTorch's own parallelism (DDP or FSDP2 for dp, DTensor "
                    "tensor parallel for tp, torch.distributed.pipelining 1F1B / GPipe for pp; gloo on "
                    "CPU, NCCL on CUDA), skip measure.warmup steps, and time measure.steps steps on "
                    "every rank. The rows (one per step and rank, with the full layout) go to out=FILE; "
                    "layouts already in the file are kept, a layout measured again is replaced.",
        examples=["prism measure model=tiny parallel.dp=2 measure.steps=30 out=runs/measured.parquet",
                  "prism measure model=small parallel.pp=2 parallel.global_batch_size=8 out=runs/measured.parquet",
                  "prism measure model=tiny parallel.tp=2 parallel.recompute=full out=runs/measured.parquet"]),
    "validate": dict(
        run=_validate, help="score predicted step-time distributions against measured ones",
        description="For every layout of a `prism measure` file, predict the step-time distribution "
                    "on the given hardware and compare it with the measured steps (the slowest rank "
                    "of each): absolute % error of the median and of p95, Kolmogorov-Smirnov "
                    "distance, coverage of the predicted 80% interval. Draws a PNG of predicted vs "
                    "measured CDFs (out=PNG, default beside the measured file).",
        examples=["prism validate measured=runs/measured.parquet hardware=local-cpu",
                  "prism validate measured=runs/measured.parquet hardware=local-cpu --json",
                  "prism validate measured=runs/measured.parquet models_dir=runs/models out=runs/cdf.png"]),
    "calibrate": dict(
        run=_calibrate, help="fit the in-situ calibration of a hardware's models to measured steps",
        description="Operators timed alone miss what a training step adds around them (framework "
                    "time per call, DTensor dispatch under tp, caches shared with neighbours). Fit "
                    "compute_scale, op_overhead_us and tp_overhead_us to the measured layouts of a "
                    "`prism measure` file, store them in the models' manifest, and report how well "
                    "each layout is predicted by a calibration fitted on the other layouts only.",
        examples=["prism calibrate measured=runs/measured.parquet hardware=local-cpu models_dir=runs/models",
                  "prism calibrate measured=runs/suite/measured.parquet models_dir=runs/suite/models --json"]),
    "samples": dict(
        run=_samples, help="summarise a sample store (shapes, rows, repeats per op)",
        description="Read a folder of sampling runs (or one .parquet file) and list, per "
                    "hardware, op, pass and dtype, the distinct shapes, rows, repeats and the "
                    "range of per-shape median latencies.",
        examples=["prism samples samples/cpu", "prism samples samples/cpu --json"], positional="path"),
    "import-microbench": dict(
        run=_import_microbench, help="import published GPU microbenchmarks (GEMM, FlashAttention, NCCL) as samples",
        description="Turn the published microbenchmarks of data/microbench (OpenXLA's H100/B200 GEMM and "
                    "collective tables, its GB200/GB300 NVL72 collectives with B200's GEMMs, FlashAttention-2 on "
                    "H100, nccl-tests on a DGX H100) into one run per "
                    "hardware, out/microbench-<hardware>.parquet, tagged origin=microbench:<source>. Models "
                    "trained on it (prism train) rest on 'microbenchmarks', the middle evidence tier between "
                    "measured samples and the spec-only prior; their collectives cover one node (one NVLink domain: "
                    "a whole NVL72 rack) only. Rows "
                    "faster than the profile's peak are left out and counted.",
        examples=["prism import-microbench data/microbench out=samples/microbench",
                  "prism train samples=samples/microbench/microbench-h100-sxm.parquet hardware=h100-sxm",
                  "prism import-microbench data/microbench out=samples/microbench hardware=b200 --json"],
        positional="path", positional_help="the microbench folder, e.g. data/microbench",
        overrides=True, overrides_help="out=DIR (required); hardware=h100-sxm,b200,gb200-nvl72,gb300-nvl72 "
                       "(default: all four); output=json is the same as --json"),
    "import-trace": dict(
        run=_import_trace, help="import PyTorch profiler (Kineto) traces of a real job as samples",
        description="Read torch.profiler traces (Chrome-trace JSON or .json.gz, one file per rank, recorded with "
                    "record_shapes=True) as a stream and write every recognised call as one sample row, timed "
                    "in situ, into out/trace-<hardware>-<time>.parquet (origin=trace): linear/mm -> gemm, "
                    "SDPA -> attention, rms_norm, layer_norm, embedding, cross_entropy, residual adds, the "
                    "Adam step, NCCL and gloo collectives, and prism::<op> record_function regions (RoPE, "
                    "SwiGLU). A call's backward row gathers every autograd node its forward created. GPU "
                    "traces are timed by their kernels, CPU traces by op wall time. Unrecognised ops and "
                    "kernels are counted and listed by time. Where the trace marks profiler steps, the step "
                    "time no recognised op explains is reported as framework time per call, and `prism train` "
                    "stores it with the models.",
        examples=["prism import-trace traces/rank0.json traces/rank1.json out=samples/trace hardware=local-cpu",
                  "prism import-trace run/*.json.gz out=samples/trace       # GPU traces name their device",
                  "prism train samples=samples/trace hardware=local-cpu models_dir=runs/trace-models",
                  "prism measure model=small out=runs/m.parquet measure.trace_dir=traces   # record some"],
        positional="path", nargs="+", metavar="FILE",
        positional_help="trace files, then out=DIR (required), hardware=NAME (required for CPU traces), "
                        "profiler_cost_us=US (CPU traces: the profiler's cost per recorded event; default: "
                        "the one prism measure records) and output=json|table"),
    "import-ett": dict(
        run=_import_ett, help="import estimate-train-time (arXiv 2509.22832) samples into the sample store",
        description="Convert one cluster folder of the estimate-train-time layout "
                    "(operator/<GPU>_<function>_fp16.csv, nccl/<GPU>_<function>_fp16[_<nodes>_<gpus>].csv) "
                    "into one run, out/ett-<cluster>.parquet, with each ETT function mapped onto PRISM's "
                    "ops (linear1-4 and linear_final -> gemm, flash_atten -> attention, allreduce -> "
                    "all_reduce, ...) and tagged origin=ett:<cluster>/<function>. Prints rows per op and "
                    "per function, the files and rows left out and why, and rows that look physically "
                    "implausible. An existing run is never overwritten. out=DIR is this verb's only "
                    "setting (plus output=json); it reads no Hydra configuration.",
        examples=["prism import-ett data/ett/Perlmutter out=samples/ett",
                  "prism import-ett data/ett/Vista out=samples/ett --json",
                  "prism samples samples/ett      # what was imported"],
        positional="path", positional_help="an ETT cluster folder, e.g. data/ett/Perlmutter",
        overrides=True, overrides_help="out=DIR (required): the sample store to write ett-<cluster>.parquet into; "
                       "output=json is the same as --json"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prism",
        description="PRISM predicts the training time of distributed LLM jobs as a probability "
                    "distribution, from operator samples and quantile regressors.",
        epilog="Run 'prism <verb> --help' for a verb's settings and examples.")
    sub = parser.add_subparsers(dest="verb", metavar="<verb>", required=True)
    for name, verb in VERBS.items():
        p = sub.add_parser(name, help=verb["help"], description=verb["description"],
                           epilog="examples:\n  " + "\n  ".join(verb["examples"]),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if "positional" in verb:
            p.add_argument(verb["positional"], nargs=verb.get("nargs"), metavar=verb.get("metavar"), help=verb.get(
                "positional_help", "sample store: a folder of runs or one .parquet file"))
        if "positional" not in verb or verb.get("overrides"):  # a positional verb may take key=value too
            p.add_argument("overrides", nargs="*", metavar="key=value",
                           help=verb.get("overrides_help", _OVERRIDES_HELP))
        if "positional" not in verb:
            p.add_argument("--show-config", action="store_true",
                           help="print the composed configuration and exit (as JSON with --json)")
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        p.set_defaults(run=verb["run"])
    return parser


def _terminate(signum, frame):
    raise KeyboardInterrupt  # SIGTERM (a scheduler's kill) stops as cleanly as Ctrl-C


def _flags_first(argv: list[str]) -> list[str]:
    """``argv`` with the verb's flags before its key=value words: argparse stops reading
    those at the first flag, so ``prism predict model=x --json gpus=8`` would refuse gpus=8."""
    verb, rest = argv[:1], argv[1:]
    return verb + [a for a in rest if a.startswith("-")] + [a for a in rest if not a.startswith("-")]


def _wants_json(args) -> bool:
    return bool(getattr(args, "json", False)) or "output=json" in getattr(args, "overrides", ())


#: A write that failed for want of room, not for a bad path: the disk or quota full, the file
#: system read-only (an output folder is checked for writing before any work; these arrive later).
FULL_DISK = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}
#: The settings that name where a verb writes.
WRITES_TO = ("out", "models_dir", "output_dir", "plot", "measure.trace_dir")


def _refused(args, exc: PrismError) -> int:
    print(f"prism {args.verb}: error: {exc}", file=sys.stderr)
    if _wants_json(args):  # a script reading stdout as JSON (prism ... --json | jq) gets the error too
        print(json.dumps({"error": str(exc), "field": exc.field}))
    return 2


def _plain_text_terminal() -> None:
    """Where stdout or stderr cannot encode the reports' µ, · and – (a non-UTF-8 locale with
    Python's UTF-8 mode off), such characters print as ? rather than failing the verb."""
    for stream in (sys.stdout, sys.stderr):
        try:
            "µ·–".encode(stream.encoding or "utf-8")
        except (UnicodeEncodeError, LookupError):
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(errors="replace")


def main(argv=None) -> int:
    # PRISM's arrays are small: the BLAS thread pools numpy and scipy start (OpenBLAS, a
    # thread per core each) only cost start-up and shutdown, 0.1 s of a 0.6 s prism predict
    # on 2 busy cores. Set before numpy loads; a user's own setting stands.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    args = build_parser().parse_args(_flags_first(sys.argv[1:] if argv is None else list(argv)))
    _plain_text_terminal()
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return args.run(args)
    except PrismError as exc:
        return _refused(args, exc)
    except OSError as exc:
        if exc.errno not in FULL_DISK:
            raise
        given = [o for o in getattr(args, "overrides", ()) if o.partition("=")[0] in WRITES_TO]
        where = exc.filename or " or ".join(given) or "the output"
        return _refused(args, PrismError(f"{where}: {exc.strerror or os.strerror(exc.errno)} while writing; free space "
                                         f"there or write elsewhere, and run again (files are replaced whole, so what "
                                         f"was stored before is as it was)", field=exc.filename))
    except KeyboardInterrupt:
        print(f"prism {args.verb}: interrupted", file=sys.stderr)
        if _wants_json(args):
            print(json.dumps({"error": "interrupted", "field": None}))
        return 130
    except BrokenPipeError:  # the reader left (prism ... | head): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush stays quiet
        return 128 + signal.SIGPIPE
    finally:
        # the verb is over (its files saved): a SIGTERM while the interpreter shuts down and joins
        # joblib's worker threads (prism train) is no interrupt to raise, which would print a traceback
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())

"""``prism <verb> [key=value ...]``: the command line.

Each verb composes ``conf/`` with Hydra overrides, calls one Python function and prints
a table (default) or JSON (``--json`` or ``output=json``). Bad input ends with one line
naming the field and the fix, and exit code 2. Verbs that measure (``sample``) import
the torch-based :mod:`sampling` package only when they run, so ``predictor`` itself
never imports torch.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
from dataclasses import asdict
from importlib import import_module

from omegaconf import OmegaConf

from predictor.errors import PrismError

_OVERRIDES_HELP = ("Hydra overrides, key=value: choose a config group (hardware=h100-sxm, "
                   "model=llama3-8b, sampling=quick) or set any key (sampling.budget_s=60, "
                   "parallel.tp=8, sampling.ops=[gemm,attention]). --show-config lists every key.")


def _load(args):
    from predictor.config import load_config
    overrides = list(args.overrides)
    if args.json:
        overrides.append("output=json")
    cfg = load_config(overrides)
    if args.show_config:
        print(OmegaConf.to_yaml(cfg), end="")
        raise SystemExit(0)
    return cfg


def _print(cfg, payload, table: str) -> None:
    if cfg.output == "json":
        print(json.dumps(payload, indent=2, default=str))
    else:
        print(table)


def _sample(args) -> int:
    cfg = _load(args)
    try:
        runner = import_module("sampling.runner")
    except ImportError as exc:
        raise PrismError(f"prism sample needs torch ({exc}); install the measuring extra: "
                         f"pip install -e '.[sampling]'") from None
    report = runner.run_sampling(cfg, progress=sys.stderr.isatty() or not cfg.output == "json")
    lines = [f"run file     {report.run_file or '(none: no row measured)'}",
             f"status       {report.status}",
             f"rows         {report.rows}  ({report.elapsed_s:.1f} s)",
             f"resumed      {report.resumed_tasks} task(s) of plan {report.plan_id} were already stored",
             f"still to do  {report.remaining_tasks} task(s)"]
    if report.shapes_per_op:
        lines.append("shapes       " + ", ".join(f"{op} {n}" for op, n in report.shapes_per_op.items()))
    for r in report.recovered:
        lines.append(f"recovered    {r} (a run killed before it could close)")
    for f in report.failures:
        lines.append(f"failed       {f['task']}: {f['error']}")
    if report.status == "interrupted":
        lines.append("interrupted: every flushed row is kept; run the same command again to resume")
    elif report.status == "budget":
        lines.append(f"budget spent with {report.remaining_tasks} task(s) left: run again with a larger "
                     f"sampling.budget_s to measure them (stored shapes are skipped)")
    elif report.status == "nothing-to-do":
        lines.append("nothing to do: this plan is already measured (or its budget spent); "
                     "raise sampling.budget_s or change the plan to measure more")
    _print(cfg, asdict(report), "\n".join(lines))
    return 130 if report.status == "interrupted" else 0


def _samples(args) -> int:
    from predictor.summary import summarize
    table = summarize(args.path)
    if args.json:
        print(table.to_json(orient="records", indent=2))
    else:
        print(table.to_string(index=False) if len(table) else f"{args.path}: no samples")
    return 0


VERBS = {
    "sample": dict(
        run=_sample, help="measure operator latencies on this machine into the sample store",
        description="Time every op of the sampling plan (compute ops in this process, "
                    "collectives under torchrun) and write every repeat to a new Parquet run "
                    "in output_dir. Re-running the same command resumes: shapes already "
                    "stored are skipped. Ctrl-C keeps every flushed row.",
        examples=["prism sample hardware=local-cpu sampling=quick sampling.budget_s=60 output_dir=samples/cpu",
                  "prism sample sampling.ops=[gemm,attention] sampling.shapes_per_op=40",
                  "prism sample hardware=h100-sxm sampling.dtypes=[bfloat16,float16]   # on a GPU host"]),
    "samples": dict(
        run=_samples, help="summarise a sample store (shapes, rows, repeats per op)",
        description="Read a folder of sampling runs (or one .parquet file) and list, per "
                    "hardware, op, pass and dtype, the distinct shapes, rows, repeats and the "
                    "range of per-shape median latencies.",
        examples=["prism samples samples/cpu", "prism samples samples/cpu --json"], positional="path"),
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
            p.add_argument(verb["positional"], help="sample store: a folder of runs or one .parquet file")
        else:
            p.add_argument("overrides", nargs="*", metavar="key=value", help=_OVERRIDES_HELP)
            p.add_argument("--show-config", action="store_true",
                           help="print the composed configuration and exit")
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        p.set_defaults(run=verb["run"])
    return parser


def _terminate(signum, frame):
    raise KeyboardInterrupt  # SIGTERM (a scheduler's kill) stops as cleanly as Ctrl-C


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return args.run(args)
    except PrismError as exc:
        print(f"prism {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"prism {args.verb}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

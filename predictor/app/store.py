"""The verbs of the sample store that compose no configuration, each reading its own few
settings (:class:`predictor.app.settings.Plain`): ``prism samples`` (summarise a store) and
the importers of published or recorded measurements, ``prism import-microbench``, ``prism
import-trace`` and ``prism import-ett``."""
from __future__ import annotations

import sys

from predictor.app.grammar import Paths, listed
from predictor.app.output import show_reports
from predictor.app.settings import Plain, read_plain
from predictor.app.verbs import verb
from predictor.core.errors import PrismError


def _out(example: str) -> dict:
    """An importer's one required setting, ``out``, with the line saying so."""
    return {"out": f"out=DIR is required: the sample store to write into, e.g. {example}"}


@verb("samples", help="summarise a sample store (shapes, rows, repeats per op)",
      description="Read a folder of sampling runs (or one .parquet file) and list, per "
                  "hardware, op, pass and dtype, the distinct shapes, rows, repeats and the "
                  "range of per-shape median latencies.",
      examples=["prism samples samples/cpu", "prism samples samples/cpu --json"],
      paths=Paths(key="samples"), reads=Plain({}, "output=json (the same as --json)"))
def _samples(command) -> int:
    from predictor.data.store import no_runs
    from predictor.data.summary import summarize
    as_json = read_plain(command)["json"]
    table = summarize(command.path)
    if not len(table):  # an error, as prism train's of the same store: a script must not read it as a summary
        raise PrismError(f"{command.path}: no samples; {no_runs(command.path)}", field='path')
    if as_json:
        print(table.to_json(orient="records", indent=2))
    else:
        print(table.to_string(index=False))
        if table.unusable_rows.sum():
            print(f"note: {int(table.unusable_rows.sum())} rows have a latency that is not a positive number; "
                  f"prism train refuses them: drop those rows or sample again")
    return 0


@verb("import-microbench", help="import published GPU microbenchmarks (GEMM, FlashAttention, NCCL) as samples",
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
      paths=Paths(help="the microbench folder, e.g. data/microbench"),
      reads=Plain({"out": None, "hardware": None}, "out=DIR (required), hardware=NAME[,NAME] and output=json|table",
                  required=_out("out=samples/microbench")),
      settings_help="out=DIR (required); hardware=h100-sxm,b200,gb200-nvl72,gb300-nvl72 (default: all four); "
                    "output=json is the same as --json")
def _import_microbench(command) -> int:
    settings = read_plain(command)
    from predictor.data.importers.microbench import SOURCES, check_target, import_microbench
    names = list(dict.fromkeys(listed("hardware", settings["hardware"] or ",".join(SOURCES))))  # b200,b200: one run
    for name in names:
        if check_target(name, settings["out"], command.path):
            print(f"prism import-microbench: microbench-{name} was already imported from these tables into "
                  f"{settings['out']}: kept", file=sys.stderr)
    reports = [import_microbench(command.path, h, settings["out"]) for h in names]
    show_reports(reports, settings["json"])
    return 0


@verb("import-trace", help="import PyTorch profiler (Kineto) traces of a real job as samples",
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
      paths=Paths("FILE", "trace files", many=True),
      reads=Plain({"out": None, "hardware": None, "profiler_cost_us": None},
                  "FILE... out=DIR (required), hardware=NAME, profiler_cost_us=US and output=json|table",
                  required=_out("out=samples/trace")),
      settings_help="out=DIR (required), hardware=NAME (required for CPU traces), profiler_cost_us=US (CPU traces: "
                    "the profiler's cost per recorded event; default: the one prism measure records) and "
                    "output=json|table")
def _import_trace(command) -> int:
    settings = read_plain(command)
    from predictor.data.importers.trace import import_trace
    cost = settings["profiler_cost_us"]
    try:
        cost = None if cost is None else float(cost)
    except ValueError:
        raise PrismError(f"profiler_cost_us={cost}: give the microseconds (>= 0) one recorded event costs, e.g. 0.5",
                         field="profiler_cost_us") from None
    report = import_trace(command.paths, settings["out"], settings["hardware"], cost, progress=sys.stderr.isatty())
    show_reports(report, settings["json"])
    return 0


@verb("import-ett", help="import estimate-train-time (arXiv 2509.22832) samples into the sample store",
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
      paths=Paths(help="an ETT cluster folder, e.g. data/ett/Perlmutter"),
      reads=Plain({"out": None}, "out=DIR (required) and output=json|table", required=_out("out=samples/ett")),
      settings_help="out=DIR (required): the sample store to write ett-<cluster>.parquet into; "
                    "output=json is the same as --json")
def _import_ett(command) -> int:
    settings = read_plain(command)
    from predictor.data.importers.ett import import_ett
    show_reports(import_ett(command.path, settings["out"]), settings["json"])
    return 0

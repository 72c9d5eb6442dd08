"""The verbs of ``prism``, each declared once, beside the function it calls:

    @verb("predict", help="...", description="...", examples=[...], reads=Config("gpus", ...))
    def _predict(command) -> int:
        cfg = load(command)
        ...

A :class:`Verb` holds its name, its help, the examples its ``--help`` teaches, the settings
node it reads (:mod:`predictor.app.settings`: :class:`Config` or :class:`Plain`), the paths
it takes (:class:`predictor.app.grammar.Paths`, or none) and the function it calls. The
function is given the :class:`~predictor.app.grammar.Command` and reads its node with
:func:`~predictor.app.settings.load` (the checked configuration) or
:func:`~predictor.app.settings.read_plain` (its own settings), after any reading of its
words of its own (``prism compare`` takes ``hardware=[a,b]`` out of Hydra's reach first).
The modules of :data:`MODULES` declare them; their order is the order of ``prism --help``.
Every verb is read by the one grammar of :mod:`predictor.app.grammar`, and the parser
(:func:`build_parser`) is the same for each: words, ``--json``, and ``--show-config`` for
the verbs that compose ``conf/``.

Adding a verb: declare it in one of :data:`MODULES` (one file), or in a new module named
in :data:`MODULES` (two); its test is one more.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module

from predictor.app.grammar import Paths
from predictor.app.settings import Config, Plain

#: The modules declaring verbs, in the order ``prism --help`` lists them.
MODULES = ("predictor.app.training", "predictor.app.predicting", "predictor.app.measuring", "predictor.app.store")

#: What the key=value words of a verb composing conf/ are.
OVERRIDES_HELP = ("Hydra overrides, key=value: choose a config group (hardware=h100-sxm, "
                  "model=llama3-8b, sampling=quick) or set any key (sampling.budget_s=60, "
                  "parallel.tp=8, parallel.ep=8 for Mixture-of-Experts, hardware.gemm_dtype=fp8 (or nvfp4 on "
                  "Blackwell) for the GEMMs' precision, sampling.ops=[gemm,attention]). --show-config lists every "
                  "key.")


@dataclass(frozen=True)
class Verb:
    """One verb of ``prism``: see the module's docstring."""

    name: str
    run: Callable
    help: str
    description: str
    examples: list[str]
    reads: Config | Plain = field(default_factory=Config)
    paths: Paths | None = None
    settings_help: str | None = None  # the key=value words' help line (a Plain verb's usage by default)

    def __getitem__(self, key: str):  # VERBS["predict"]["examples"], as when verbs were dicts
        return getattr(self, key)

    @property
    def composes(self) -> bool:
        """Whether it composes ``conf/`` (and so takes ``--show-config``)."""
        return isinstance(self.reads, Config)


#: Every verb, by name, as the modules of MODULES declare them (:func:`verbs`).
VERBS: dict[str, Verb] = {}


def verb(name: str, **declared) -> Callable:
    """Declare the decorated function as verb ``name`` (the fields of :class:`Verb`)."""
    def declare(run: Callable) -> Callable:
        VERBS[name] = Verb(name, run, **declared)
        return run
    return declare


def verbs() -> dict[str, Verb]:
    """Every verb, its modules imported (each imports its analyses only when it runs)."""
    for module in MODULES:
        import_module(module)
    rank = {module: i for i, module in enumerate(MODULES)}  # by module, then as each declares them
    ordered = sorted(VERBS.values(), key=lambda v: rank.get(v.run.__module__, len(rank)))
    VERBS.clear()
    VERBS.update((v.name, v) for v in ordered)
    return VERBS


def nodes() -> dict:
    """Each verb's settings node, by name: what :func:`predictor.app.settings.refuse_unread` names."""
    return {name: v.reads for name, v in verbs().items()}


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``prism``: one sub-parser a verb, each the same grammar."""
    parser = argparse.ArgumentParser(
        prog="prism",
        description="PRISM predicts the training time of distributed LLM jobs as a probability "
                    "distribution, from operator samples and quantile regressors.",
        epilog="Run 'prism <verb> --help' for a verb's settings and examples.")
    sub = parser.add_subparsers(dest="verb", metavar="<verb>", required=True)
    for name, v in verbs().items():
        settings_help = v.settings_help or (OVERRIDES_HELP if v.composes else v.reads.usage)
        usage = None if v.paths is None else (  # the paths, then the settings
            f"%(prog)s [-h] [--json] {v.paths.metavar}{f' [{v.paths.metavar} ...]' if v.paths.many else ''}"
            + (" [key=value ...]" if settings_help else ""))
        p = sub.add_parser(name, help=v.help, description=v.description, usage=usage,
                           epilog="examples:\n  " + "\n  ".join(v.examples),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        # one list of words, which the grammar tells apart (paths, settings); the help shows each
        p.add_argument("words", nargs="*", metavar=v.paths.metavar if v.paths else "key=value",
                       help=v.paths.help if v.paths else settings_help)
        if v.paths and settings_help:  # shown only: the words above take every word
            p.add_argument("shown_settings", nargs="*", metavar="key=value", help=settings_help)
        if v.composes:
            p.add_argument("--show-config", action="store_true",
                           help="print the composed configuration and exit (as JSON with --json)")
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        p.set_defaults(parser=p)
    return parser

"""The settings node of each verb: which keys it reads, and their reading.

A verb reads one of two kinds of node:

- :class:`Config`: the configuration composed from ``conf/`` and the command line's
  overrides (:mod:`predictor.app.config`), of which the verb reads the config groups,
  ``output``, ``seed`` and its own top-level keys (``reads``). A top-level key another
  verb reads, given to this one, is refused naming the verbs that read it: ``prism search
  confidence=0.95`` would otherwise rank by p50 as if it were heard. :func:`load` composes
  and checks it.
- :class:`Plain`: a verb that composes no configuration (the importers, ``predict-batch``,
  ``samples``) reads its own few keys, each with a default; anything else is refused with
  the verb's ``usage``. :func:`read_plain` reads them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from predictor.app.grammar import Command, split_setting
from predictor.core.choices import Output, choice
from predictor.core.errors import PrismError

#: The refusal of an ``output=`` no verb prints.
OUTPUT_CHOICES = "choose {or_options} (--json is output=json)"

#: The top-level settings that name a file or folder, each with an example.
PATH_SETTINGS = {"samples": "samples=samples/cpu", "models_dir": "models_dir=runs/models",
                 "measured": "measured=runs/measured.parquet", "published": "published=runs.csv",
                 "out": "out=runs/measured.parquet", "output_dir": "output_dir=samples/cpu", "plot": "plot=step.png"}


@dataclass(frozen=True)
class Config:
    """A verb composing ``conf/``: the top-level keys it reads beyond the config groups,
    ``output`` and ``seed`` (which every such verb reads)."""

    reads: frozenset[str] = frozenset()

    def __init__(self, *reads: str):
        object.__setattr__(self, "reads", frozenset(reads))


@dataclass(frozen=True)
class Plain:
    """A verb reading its own ``key=value`` settings, no configuration: each key with its
    default (text, or None), ``usage`` how to write them (``'x=1': VERB takes USAGE``) and
    ``required`` the keys without which it cannot run, each with the line saying so."""

    defaults: dict[str, str | None] = field(default_factory=dict)
    usage: str = ""
    required: dict[str, str] = field(default_factory=dict)


def refuse_unread(verb: str, node: Config, settings, nodes: dict) -> None:
    """Refuse a setting of ``settings`` (:class:`predictor.app.config.Setting`) that another
    verb's :class:`Config` reads and ``node`` does not, naming the verbs that read it;
    ``nodes``: every verb's node, by name."""
    readers_of = {}
    for name, other in nodes.items():
        for key in other.reads if isinstance(other, Config) else ():
            readers_of.setdefault(key, []).append(f"prism {name}")
    for setting in settings:
        key, text = setting.key.split(".")[0], setting.text
        if key in readers_of and key not in node.reads:
            readers = readers_of[key]
            raise PrismError(f"{text}: prism {verb} does not read {key} ({', '.join(readers)} "
                             f"{'reads' if len(readers) == 1 else 'read'} it); drop it", field=key)


def load(command: Command, hardware: list[str] | None = None):
    """The checked configuration of ``command``, whose verb reads a :class:`Config`;
    ``--show-config`` prints it and exits, composed once per profile of ``hardware`` where
    given (prism compare runs each, not the default one)."""
    from predictor.app.config import check_keys, compose
    from predictor.app.verbs import nodes
    every = nodes()
    node = every[command.verb]
    overrides = list(command.settings)
    if command.json and "output=json" not in overrides:
        overrides.append("output=json")
    composition = compose(overrides)
    if command.show_config:
        _show(composition, overrides, hardware)
    check_keys(composition)
    refuse_unread(command.verb, node, composition.overrides, every)
    _paths_as_typed(composition)
    choice(Output, composition.cfg.get("output", "table"), "output", OUTPUT_CHOICES, quoted=False)
    return composition.cfg


def _show(composition, overrides: list[str], hardware: list[str] | None):
    """``--show-config``: print the composition (one a profile of ``hardware``) and exit."""
    from predictor.app.config import compose
    from predictor.app.output import as_json
    shown = [composition] if hardware is None else [compose([*overrides, f"hardware={h}"]) for h in hardware]
    if composition.cfg.get("output") == "json":  # a script's --json: the values, without conf/'s comments
        from omegaconf import OmegaConf
        values = [OmegaConf.to_container(c.cfg, resolve=True) for c in shown]
        print(as_json(values[0] if hardware is None else values))  # compare's: a list, one a profile
    else:
        from predictor.app.config_text import show_config
        for i, (name, c) in enumerate(zip(hardware or [None], shown)):
            head = "" if name is None else f"# prism compare: profile {i + 1} of {len(shown)}, hardware={name}\n"
            print(("\n" if i else "") + head + show_config(c), end="")
    raise SystemExit(0)


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


def read_plain(command: Command) -> dict:
    """The settings of ``command``, whose verb reads a :class:`Plain` node: its defaults,
    overridden by the command line's ``key=value`` (quotes taken off); ``output`` is every
    verb's, and ``json`` says whether it prints JSON (``--json`` or ``output=json``)."""
    from predictor.app.verbs import nodes
    node = nodes()[command.verb]
    settings = {"output": None, **node.defaults}
    for text in command.settings:
        key, value = split_setting(text)
        if not key or not value or key not in settings:
            raise PrismError(f"{text!r}: {command.verb} takes {node.usage}", field=str(text))
        settings[key] = value
    for key, why in node.required.items():
        if not settings.get(key):
            raise PrismError(why, field=key)
    if settings["output"] is not None:
        choice(Output, settings["output"], "output", OUTPUT_CHOICES, quoted=False)
    settings["json"] = command.json or settings["output"] == "json"
    return settings


# ---------------------------------------------------------------- reading a composed configuration

def job(cfg):
    """The model, hardware and parallel layout of a composed configuration, checked."""
    from predictor.core.profiles import section
    from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig
    return (section(cfg, "model", ModelConfig), section(cfg, "hardware", HardwareConfig),
            section(cfg, "parallel", ParallelConfig))


def keywords(cfg, *keys) -> dict:
    """The top-level settings ``keys`` of ``cfg`` as keyword arguments of an analysis; a
    setting left null keeps the analysis' default."""
    return {key: cfg[key] for key in keys if cfg.get(key) is not None}


def check_seed(cfg) -> int:
    """``seed``, checked before any work: validate and calibrate read it after minutes of it."""
    from predictor.core.specs import check_number
    check_number("seed", cfg.seed, integer=True, zero=True)
    return cfg.seed


def flag(cfg, key: str) -> bool:
    """A true/false setting, or one error naming it (a typo must not read as true)."""
    value = cfg[key]
    if not isinstance(value, bool):
        raise PrismError(f"{key}={value}: give true or false", field=key)
    return value

"""The one grammar of the command line: ``prism <verb> [PATH ...] [key=value ...] [--json]
[--show-config]``.

Every verb reads its words the same way (:func:`read`):

- a flag starts with ``-``, and may stand anywhere (argparse reads ``--json`` and
  ``--show-config``; ``--json`` is ``output=json``);
- a verb that takes paths (:class:`Paths`) reads a word as one unless it is ``key=value``
  and names no file that exists (``out=x`` is a setting, a file ``runs=1.csv`` that is
  there a path); a verb without paths reads every word as a setting;
- a setting is ``key=value``: a value in brackets is a list (``sampling.ops=[gemm,attention]``,
  ``hardware=[a,b]``), one in quotes is text (``out='my runs'``). A verb composing
  ``conf/`` hands its settings to Hydra's grammar (:mod:`predictor.app.config`: ``+key``,
  ``~key`` and quoting too); one reading its own (:class:`predictor.app.settings.Plain`)
  takes them through :func:`split_setting` and :func:`listed`.

Before, four grammars read the words: Hydra overrides (the verbs composing ``conf/``), one
positional path without settings (``samples``), one path then settings parsed apart twice
(``predict-batch`` without quotes, the importers with them), and files mixed with settings
(``import-trace``). This module is all of them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from predictor.core.errors import PrismError


@dataclass(frozen=True)
class Paths:
    """The paths a verb takes before (or among) its settings."""

    metavar: str = "path"
    help: str = "sample store: a folder of runs or one .parquet file"
    many: bool = False  # FILE...: one or more; else exactly one
    key: str | None = None  # a key=value naming the path, refused: the path is given bare (prism samples DIR)


@dataclass
class Command:
    """One command line, read: the verb, its paths and its ``key=value`` settings as written."""

    verb: str
    paths: list[str] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)
    json: bool = False  # --json
    show_config: bool = False  # --show-config

    @property
    def path(self) -> str | None:
        """The one path of a verb that takes one."""
        return self.paths[0] if self.paths else None

    @property
    def wants_json(self) -> bool:
        """Whether stdout is read as JSON: ``--json`` or ``output=json``."""
        return self.json or "output=json" in self.settings


def flags_first(argv: list[str]) -> list[str]:
    """``argv`` with the verb's flags before its words: argparse stops reading the words
    at the first flag, so ``prism predict model=x --json gpus=8`` would refuse gpus=8."""
    verb, rest = argv[:1], argv[1:]
    return verb + [a for a in rest if a.startswith("-")] + [a for a in rest if not a.startswith("-")]


def is_setting(word: str, takes_paths: bool) -> bool:
    """Whether ``word`` is a setting: every word of a verb without paths; ``key=value`` that
    names no file (False, not OSError, for a name too long) for one with paths."""
    if not takes_paths:
        return True
    key, sep, _ = word.partition("=")
    return bool(sep and key) and not os.path.exists(word)


def read(verb: str, words: list[str], paths: Paths | None, *, json: bool = False,
         show_config: bool = False) -> tuple[Command, str | None]:
    """The :class:`Command` of ``verb``'s ``words``, and what argparse would say of a wrong
    number of paths (None where right): the caller prints it as argparse's usage error."""
    settings = [w for w in words if is_setting(w, paths is not None)]
    for text in settings if paths is not None and paths.key else ():
        key, value = split_setting(text)
        if key == paths.key:  # train's way of naming a store
            raise PrismError(f"{text}: prism {verb} takes the folder itself: prism {verb} {value}", field="path")
    given = [w for w in words if not is_setting(w, paths is not None)]
    command = Command(verb, given, settings, json, show_config)
    if paths is None:
        return command, None
    if not words or not (given or paths.many):  # FILE... settings alone: the verb says that no file was given
        return command, f"the following arguments are required: {paths.metavar}"
    if len(given) > 1 and not paths.many:
        return command, f"unrecognized arguments: {' '.join(given[1:])}"
    return command, None


def unquoted(value: str) -> str:
    """``value`` without one pair of quotes around it (``out='my runs'``, as Hydra's grammar reads it)."""
    if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def split_setting(text: str) -> tuple[str, str]:
    """(key, value) of ``key=value``, the value unquoted; ('', '') for a word that is none."""
    key, sep, value = text.partition("=")
    return (key, unquoted(value)) if sep else ("", "")


def listed(key: str, value: str) -> list[str]:
    """The names of a list value as written, repeats included: ``[a,b]`` or ``a,b``."""
    value = value.strip()
    if value.startswith("[") != value.endswith("]"):  # a bracket lost in the shell, or a typo
        raise PrismError(f"{key}={value}: an unclosed bracket; write {key}=[a,b] or {key}=a,b (quoted in "
                         f"the shell: '{key}=[a,b]')", field=key)
    names = [n.strip().strip("'\"") for n in value.removeprefix("[").removesuffix("]").split(",")]
    return [n for n in names if n]

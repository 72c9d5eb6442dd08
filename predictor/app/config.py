"""Configuration from the command line: ``conf/config.yaml``, one option of each config
group of its defaults list, and ``key=value`` overrides, composed into one
:class:`omegaconf.DictConfig`; :func:`predictor.core.profiles.section` turns one group
into a checked dataclass. Every failure becomes one :class:`PrismError` that names the
key and the fix. This is the only module that imports Hydra.

The overrides are Hydra's: its grammar (``sampling.ops=[gemm,attention]``, quoting,
``+key=value`` adds a key, ``++`` adds or changes, ``~key`` deletes) and its own code
applying them. Two shortcuts keep a plain command line from paying for Hydra (importing
it, 40 ms, and ``hydra.compose``, 70 ms, of a 0.5 s ``prism predict``):

- an override of the common form ``dotted.key=value``, the value unquoted letters,
  digits and ``_./+-``, is read here as Hydra's grammar reads it (:func:`_plain`) and
  set as Hydra sets a value; anything else goes to Hydra's parser and Hydra's code;
- the defaults lists are composed here, on plain dicts read as OmegaConf reads YAML
  (17 ms; ``hydra.compose`` also loads and merges Hydra's own job configuration, and
  merging DictConfigs deep-copies them). conf/ uses the part of a defaults list read
  here: one option per group, ``_self_``, and a group option that extends another option
  of its group (as ``sampling/full`` extends ``quick``).

Both lean on functions private to Hydra and OmegaConf (``ConfigLoaderImpl.
_apply_overrides_to_config``, ``get_yaml_loader``); tests/app/test_config.py checks the
result against Hydra itself: the same values read, the same configuration composed.
"""
from __future__ import annotations

import difflib
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from predictor.core.errors import PrismError
from predictor.core.profiles import (
    CONF_DIR,
    GROUPS,
    SHIPPED_CONF,
    check_complete,
    check_conf_dir,
    check_own_name,
    group_options,
    is_setting,
    no_option,
    read_yaml,
    takes_text,
)

if TYPE_CHECKING:
    from hydra.core.override_parser.types import Override

ROOT_FILE = CONF_DIR / "config.yaml"
SELF = "_self_"  # a defaults-list entry: the file's own keys, merged at that point

# Hydra's grammar (hydra/grammar/OverrideLexer.g4) for an unquoted value of one token
_UNSIGNED = r"(?:0|[1-9](?:_?[0-9])*)"
_POINT_FLOAT = rf"(?:{_UNSIGNED}\.|{_UNSIGNED}?\.[0-9](?:_?[0-9])*)"
_TOKENS = {
    "null": re.compile(r"[Nn][Uu][Ll][Ll]"),
    "bool": re.compile(r"[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee]"),
    "int": re.compile(rf"[+-]?{_UNSIGNED}"),
    "float": re.compile(rf"[+-]?(?:(?:{_UNSIGNED}|{_POINT_FLOAT})[eE][+-]?[0-9](?:_?[0-9])*|{_POINT_FLOAT}"
                        rf"|[Ii][Nn][Ff]|[Nn][Aa][Nn])"),
}
_PLAIN = re.compile(r"(?P<key>[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*)=(?P<value>[\w./+-]+)", re.ASCII)


@dataclass(frozen=True)
class Setting:
    """One ``key=value`` of the command line."""

    key: str
    text: str  # as written
    value: object  # as Hydra's grammar reads it
    hydra: Override | None = None  # Hydra's reading, for any other form than a plain key=value


@dataclass(frozen=True)
class Composition:
    """A composed configuration and what it was composed from (``--show-config``)."""

    cfg: DictConfig
    files: dict[str | None, list[Path]]  # group (None: the root) -> its YAML files, in merge order
    choices: dict[str, str]  # group -> the option given on the command line
    overrides: list[Setting]  # the settings applied after the files


def _plain(value: str):
    """An unquoted one-token value as Hydra reads it: null, a bool, an int, a float, else text."""
    if _TOKENS["null"].fullmatch(value):
        return None
    if _TOKENS["bool"].fullmatch(value):
        return value.lower() == "true"
    if _TOKENS["int"].fullmatch(value):
        return int(value)
    if _TOKENS["float"].fullmatch(value):
        return float(value)
    return value


def _parse(text: str) -> Setting:
    if text.startswith("="):
        raise PrismError(f"{text!r}: a setting without its key; write key=value, e.g. gpus=8")
    plain = _PLAIN.fullmatch(text)
    if plain:
        return Setting(plain["key"], text, _plain(plain["value"]))
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    try:
        override = OverridesParser.create().parse_override(text)
    except HydraException:
        raise PrismError(f"malformed override {text!r}: {_quoting_hint(text)}") from None
    if override.is_sweep_override():
        key = override.key_or_group
        if takes_text(key):  # brackets would give a list, which it refuses
            raise PrismError(f"{text}: one value per key; {key} takes one text, so write its commas in quotes: "
                             f"{key}='{text.partition('=')[2]}'", field=key)
        raise PrismError(f"{text}: one value per key (a list is written in brackets: {key}=[a,b]; "
                         f"a text with commas in quotes: {key}='a,b')", field=key)
    return Setting(override.key_or_group, text, override.value(), override)


def _quoting_hint(text: str) -> str:
    """How to write a ``key=value`` Hydra's grammar refused: a value with characters it
    reads only in quotes (a path with ``é`` or ``~``) gets the quoted form that parses."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    key, sep, value = text.partition("=")
    if value == "~" or value.startswith("~/"):  # quoted, a folder named ~ would be written
        return f"~ is the shell's to expand (not in quotes), not prism's; write {key}=$HOME{value[1:]}"
    if any(c.isdigit() and not c.isascii() for c in value):  # full-width or other scripts' digits
        ascii_value = "".join(str(unicodedata.digit(c)) if c.isdigit() else c for c in value)
        return f"digits of another script; write them as 0-9: {key}={ascii_value}"
    quote = "'" if "'" not in value else '"'
    if sep and re.fullmatch(r"[A-Za-z_][\w.-]*", key) and quote not in value and not value.startswith(("[", "{")):
        quoted = f"{key}={quote}{value}{quote}"
        try:
            OverridesParser.create().parse_override(quoted)
        except HydraException:
            pass
        else:
            outer = '"' if quote == "'" else "'"
            return (f"this value is read only in quotes; write {quoted} (in the shell, quoted once more: "
                    f"{outer}{quoted}{outer})")
    return "write key=value, e.g. sampling.budget_s=60, hardware=local-cpu or sampling.ops=[gemm,attention]"


def shell_setting(key: str, value) -> str:
    """``key=value`` as a shell line must write it for prism to read ``value`` back: as is
    where neither the shell nor Hydra's grammar reads anything in it, else quoted for Hydra
    and once more for the shell (a folder with a space or an accent)."""
    import shlex
    value = str(value)
    if shlex.quote(value) == value:
        return f"{key}={value}"
    if not any(c in value for c in "'\"$`\\!"):  # inside double quotes the shell reads none of these
        return f"\"{key}='{value}'\""
    return shlex.quote(f"{key}='{value}'") if "'" not in value else shlex.quote(f'{key}="{value}"')


def _choice(setting: Setting) -> str:
    """The option an override of a config group picks, checked against conf/<group>/."""
    group, override = setting.key, setting.hydra
    if override is not None:
        from hydra.core.override_parser.types import OverrideType
        if override.type is not OverrideType.CHANGE or override.package is not None:  # +group, ~group, group@pkg
            raise PrismError(f"{setting.text}: {group} is a config group; pick one of its files with "
                             f"{group}=NAME", field=group)
    value = setting.value if isinstance(setting.value, str) else setting.text.partition("=")[2]  # [a,b] as written
    if value not in group_options(group):
        raise no_option(group, value)
    return value


def _merged(base: dict, over: dict) -> dict:
    """``over`` merged into ``base`` as OmegaConf merges: mappings key by key, other values
    replaced. On plain dicts, without the deep copies of merging DictConfigs (half of composing)."""
    out = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merged(out[key], value) if both else value
    return out


def _load_option(group: str, name: str, files: list[Path]) -> dict:
    """``conf/<group>/<name>.yaml`` merged over the options its own defaults list names."""
    path = CONF_DIR / group / f"{name}.yaml"
    own = read_yaml(path)
    entries = own.pop("defaults", None) or [SELF]
    node = {}
    for entry in entries if SELF in entries else [*entries, SELF]:
        if entry == SELF:
            node = _merged(node, own)
            files.append(path)
        elif isinstance(entry, str) and entry in group_options(group):
            node = _merged(node, _load_option(group, entry, files))
        else:
            raise PrismError(f"{path}: defaults entry {entry}: a file of conf/{group}/ may extend only "
                             f"another file of conf/{group}/ (by its name) or _self_", field=str(path))
    check_own_name(group, name, node, path)
    return node


def compose(overrides: list[str] = ()) -> Composition:
    """Compose ``conf/config.yaml`` with ``key=value`` overrides (Hydra's grammar)."""
    check_conf_dir()  # the folder, then its config.yaml, before the options a group= override picks there
    root = read_yaml(ROOT_FILE)
    entries = _defaults(root)
    parsed = [_parse(text) for text in overrides]
    choices = {s.key: _choice(s) for s in parsed if s.key in GROUPS}
    settings = [s for s in parsed if s.key not in GROUPS]
    composed, files = {}, {}
    for entry in entries:
        if entry == SELF:
            composed = _merged(composed, root)
            files[None] = [ROOT_FILE]
        else:
            (group, default), = entry.items()
            option = choices.get(group, default)
            if option not in group_options(group):  # the command line's choice is checked already; the file's here
                raise PrismError(f"{ROOT_FILE}: defaults entry {no_option(group, option)}", field=str(ROOT_FILE))
            files[group] = []
            composed = _merged(composed, {group: _load_option(group, option, files[group])})
    cfg = OmegaConf.create(composed)
    OmegaConf.set_struct(cfg, True)  # as Hydra: a key=value override must name an existing key
    for setting in settings:
        _apply(setting, cfg)
    return Composition(cfg, files, choices, settings)


def _defaults(root: dict) -> list:
    """The defaults list of ``config.yaml``, taken out of ``root`` and checked: one
    ``group: option`` entry for each config group, and ``_self_`` (last where not written, as
    Hydra places it)."""
    entries = root.pop("defaults", None)
    fix = f"start from the shipped {SHIPPED_CONF / 'config.yaml'}"
    if not isinstance(entries, list):
        raise PrismError(f"{ROOT_FILE}: no defaults list (defaults: with one '- group: option' line for each of "
                         f"{', '.join(GROUPS)}); {fix}", field=str(ROOT_FILE))
    for entry in entries:
        if entry != SELF and not (isinstance(entry, dict) and len(entry) == 1 and next(iter(entry)) in GROUPS):
            raise PrismError(f"{ROOT_FILE}: defaults entry {entry}: write '- group: option' (a group of "
                             f"{', '.join(GROUPS)}) or '- _self_'; {fix}", field=str(ROOT_FILE))
    named = [next(iter(entry)) for entry in entries if entry != SELF]
    for group in GROUPS:
        if named.count(group) != 1:
            raise PrismError(f"{ROOT_FILE}: the defaults list names {'no' if group not in named else 'more than one'} "
                             f"{group} file; keep one '- {group}: option' line; {fix}", field=str(ROOT_FILE))
    return entries if SELF in entries else [*entries, SELF]


def _apply(setting: Setting, cfg: DictConfig) -> None:
    """Set ``setting`` in ``cfg``: a plain key=value as Hydra sets one (an existing key,
    merged), any other form by Hydra's own code."""
    if setting.hydra is None:
        try:
            OmegaConf.update(cfg, setting.key, setting.value, merge=True)
        except OmegaConfBaseException as exc:
            raise _error(f"could not set {setting.text}: {exc}", exc, cfg, setting) from None
        return
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.errors import HydraException
    try:
        ConfigLoaderImpl._apply_overrides_to_config([setting.hydra], cfg)
    except (HydraException, OmegaConfBaseException) as exc:
        raise _error(str(exc), exc.__cause__, cfg, setting) from None


def _error(message: str, cause, cfg: DictConfig, setting: Setting) -> PrismError:
    """One line for a setting that could not be set; a key that is not there named as such,
    with the settings of its section it may have meant."""
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and cause.full_key:
        key = cause.full_key
        if is_setting(key):  # a setting the chosen file leaves at its default, not a typo
            add = f"+{setting.text}" if setting.key == key else f"+{key}=VALUE"
            return PrismError(f"{key}: a setting the chosen {key.split('.')[0]} file does not write (so its default "
                              f"applies), and key=value changes only the keys a file writes; add it with {add}",
                              field=key)
        section, _, name = key.rpartition(".")
        node = OmegaConf.select(cfg, section) if section else cfg
        known = [str(k) for k in node.keys()] if isinstance(node, DictConfig) else []
        near = _meant(key, known, cfg)
        hint = (f"did you mean {' or '.join(near)}?" if near else
                f"{section or 'the configuration'} has {', '.join(known)}" if known else "")
        return PrismError(f"{key}: no such setting; {hint + '; ' if hint else ''}`prism <verb> --show-config` "
                          f"lists the settings", field=key)
    return PrismError(f"configuration: {' '.join(message.split())}")


def _meant(key: str, known: list[str], cfg: DictConfig) -> list[str]:
    """The settings a ``key`` that is none may mean: for a bare key, those it is the last part
    of (``tp``: parallel.tp, not the near top-level ``top``), else the nearest of ``known``
    (the keys of its section)."""
    section, _, name = key.rpartition(".")
    if not section:
        nested = {f"{group}.{name}" for group in GROUPS if is_setting(f"{group}.{name}")}  # written or not
        stack = [("", OmegaConf.to_container(cfg, resolve=False))]
        while stack:
            prefix, node = stack.pop()
            for child, value in node.items():
                if prefix and child == name:
                    nested.add(prefix + child)
                if isinstance(value, dict):
                    stack.append((f"{prefix}{child}.", value))
        if nested:  # the shallowest: name is model.name (and hardware.name ...), not also hardware.device.name
            depth = min(path.count(".") for path in nested)
            return sorted(path for path in nested if path.count(".") == depth)
    return [f"{section + '.' if section else ''}{near}" for near in difflib.get_close_matches(name, known, n=1)]


def check_keys(composition: Composition) -> None:
    """Refuse a top-level key no verb reads, added by ``+key=value`` or written in the
    config.yaml of a ``PRISM_CONF_DIR`` (a typo such as ``+paralel.tp=8`` or ``train_token:
    5e12`` would otherwise be ignored without a word); one that ``~key`` deleted or that
    config.yaml leaves out (the verbs read every one); and a group's entry that leaves a
    setting unset. ``--show-config`` shows such a composition as Hydra would."""
    shipped = SHIPPED_CONF / "config.yaml"  # the settings of this PRISM, whatever a PRISM_CONF_DIR writes
    known = {*GROUPS, *read_yaml(shipped)} - {"defaults"}
    for key in composition.cfg:
        if key not in known:
            given = next((s.text for s in composition.overrides if s.key.split(".")[0] == key), ROOT_FILE)
            near = " or ".join(_meant(str(key), sorted(known), composition.cfg))
            raise PrismError(f"{given}: {key} is no setting of PRISM{f'; did you mean {near}?' if near else ''}; "
                             f"`prism <verb> --show-config` lists the settings", field=str(key))
    for key in sorted(known - set(composition.cfg)):
        given = next((s.text for s in composition.overrides if s.key == key and s.text.startswith("~")), None)
        if given is None:
            raise PrismError(f"{ROOT_FILE}: no {key}, a setting prism reads; copy its line from {shipped}", field=key)
        raise PrismError(f"{given}: deletes {key}, a setting prism reads; drop {given} to keep its default, or set "
                         f"it with {key}=VALUE (`prism <verb> --show-config` shows it)", field=key)
    for group, paths in composition.files.items():
        if group is not None and isinstance(composition.cfg.get(group), DictConfig):
            check_complete(group, composition.cfg[group], paths[-1])


def load_config(overrides: list[str] = ()) -> DictConfig:
    """The configuration composed from ``conf/`` and ``key=value`` overrides."""
    return compose(overrides).cfg

"""Profiles and settings stored in ``conf/``: one YAML file per model, hardware, layout,
sampling plan and regressor, read into the checked dataclasses of
:mod:`predictor.core.specs`.

``load_model("llama3-70b")`` and ``load_hardware("h100-sxm")`` read one entry;
``section(node, name, schema)`` checks any OmegaConf node against a dataclass. Every
failure becomes one :class:`PrismError` that names the key and the fix. OmegaConf, not
Hydra: composing overrides is the command line's business (:mod:`predictor.app.config`).
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import platform
import re
import typing
from collections.abc import Mapping
from pathlib import Path

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf._utils import get_yaml_loader
from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException, ValidationError

from predictor.core.errors import PrismError
from predictor.core.specs import (
    HardwareConfig,
    MeasureConfig,
    ModelConfig,
    ParallelConfig,
    RegressorConfig,
    SamplingConfig,
)


def _fast_loader(loader):
    """OmegaConf's YAML loader (``1e12`` a float, no timestamps, duplicate keys refused) on
    libyaml's parser where PyYAML has it: the same values, read ten times as fast (the
    profiles of one ``prism predict`` took a fifth of a second in the pure-Python parser)."""
    if not getattr(yaml, "__with_libyaml__", False):
        return loader

    class CLoader(yaml.CSafeLoader):
        def construct_mapping(self, node, deep=False):
            keys = set()
            for key_node, _ in node.value:
                if key_node.tag != yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                    continue
                if key_node.value in keys:
                    raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                            f"found duplicate key {key_node.value}",
                                                            key_node.start_mark)
                keys.add(key_node.value)
            return super().construct_mapping(node, deep=deep)

    CLoader.yaml_implicit_resolvers = {k: list(v) for k, v in loader.yaml_implicit_resolvers.items()}
    CLoader.yaml_constructors = dict(loader.yaml_constructors)
    return CLoader


_SLOW_YAML_LOADER = get_yaml_loader()
_YAML_LOADER = _fast_loader(_SLOW_YAML_LOADER)


def _load_yaml(text: str):
    """``text`` read by :data:`_YAML_LOADER`; a file it refuses is read again by the
    pure-Python loader, whose error names the problem as it always has."""
    try:
        return yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError:
        if _YAML_LOADER is _SLOW_YAML_LOADER:
            raise
        return yaml.load(text, Loader=_SLOW_YAML_LOADER)

REPO_ROOT = Path(__file__).resolve().parents[2]
SHIPPED_CONF = REPO_ROOT / "conf"
#: ``PRISM_CONF_DIR`` where set, else the shipped conf/; set but empty counts as unset (as XDG reads its
#: variables), not as the current folder.
CONF_DIR = Path(os.environ.get("PRISM_CONF_DIR") or SHIPPED_CONF)
#: The reference data the project ships (published measurements, with sources and licences).
DATA_DIR = REPO_ROOT / "data"
GROUPS = ("model", "hardware", "parallel", "sampling", "regressor", "measure")
#: The dataclass each group is read into (:func:`section`).
SCHEMAS = {"model": ModelConfig, "hardware": HardwareConfig, "parallel": ParallelConfig, "sampling": SamplingConfig,
           "regressor": RegressorConfig, "measure": MeasureConfig}


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _own_conf() -> str:
    """Where ``PRISM_CONF_DIR`` points, for a message, or "" where conf/ is the shipped one."""
    return "" if CONF_DIR == SHIPPED_CONF else f"PRISM_CONF_DIR={CONF_DIR}"


def check_conf_dir() -> None:
    """Refuse a conf/ folder without a config.yaml, naming ``PRISM_CONF_DIR`` where it points
    there: every verb composes that file."""
    if (CONF_DIR / "config.yaml").is_file():
        return
    state = ("does not exist" if not CONF_DIR.exists() else "is a file, not a folder" if not CONF_DIR.is_dir()
             else "holds no config.yaml")
    raise PrismError(f"{_own_conf() or CONF_DIR}: {state}; point PRISM_CONF_DIR at a folder laid out like conf/ "
                     f"(a copy of {SHIPPED_CONF}), or unset it to use that one", field="PRISM_CONF_DIR")


#: What a setting of each type takes, in a message's words.
_WANT = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "a text"}


def section(cfg: DictConfig, name: str, schema: type):
    """Check ``cfg[name]`` against the dataclass ``schema`` and return an instance."""
    node = cfg.get(name)
    if node is None:
        raise PrismError(f"{name}: missing from the configuration", field=name)
    if not isinstance(node, DictConfig):  # analysis=foo replaced the section by one value
        raise PrismError(f"{name}={node}: {name} is a section of settings, not one value; set one of its keys, "
                         f"e.g. {name}.{dataclasses.fields(schema)[0].name}=VALUE (--show-config lists them)",
                         field=name)
    _check_switches(node, name, schema)
    _whole_numbers(node, schema)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), node)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or ""
        msg = str(exc).splitlines()[0]
        if isinstance(exc, MissingMandatoryValue):  # OmegaConf's wording names its own classes
            msg = "not set; every entry of this group sets it (see the shipped files of its conf/ folder)"
        elif isinstance(exc, ValidationError) and key and "is not a valid bool" in msg:
            msg = f"{getattr(exc, 'value', '?')!r} is not true or false"
        elif isinstance(exc, ValidationError) and key and msg.startswith("Incompatible value 'None'"):
            msg = (f"null leaves it empty, and it takes {_WANT.get(_field_type(schema, key), 'a value')}: give one, "
                   f"or drop the override for the default")
        elif isinstance(exc, ValidationError) and key and "could not be converted" in msg:
            msg = f"{getattr(exc, 'value', '?')!r} is not {_WANT.get(_field_type(schema, key), 'of the type it takes')}"
        elif "ListConfig" in msg and key and _field_type(schema, key) == "str":  # a list where one text goes
            msg = (f"{list(getattr(exc, 'value', None) or [])} is a list, and this setting takes one text; several "
                   f"values go comma-separated in quotes: {name}.{key}='a,b'")
        elif "ListConfig" in msg and key:  # a single value where the setting takes a list
            msg = f"{getattr(exc, 'value', None) or 'a single value'!r} is not a list; write it in brackets, [a,b]"
        elif isinstance(exc, ConfigKeyError) and key:
            parent, _, leaf = key.rpartition(".")
            known = _field_names(schema, parent)
            near = difflib.get_close_matches(leaf, known, n=1)
            msg = (f"no such setting; did you mean {name}.{parent + '.' if parent else ''}{near[0]}?" if near
                   else f"no such setting; {name}{'.' + parent if parent else ''} has {', '.join(known)}")
        raise PrismError(f"{name}.{key}: {msg}" if key else f"{name}: {msg}",
                         field=f"{name}.{key}" if key else name) from None


def _whole_numbers(node, schema: type) -> None:
    """A float with no fraction where ``schema`` takes a whole number, as that number:
    ``parallel.tp=8.0`` is 8 (``gpus=8.0`` already is), and so is an item of a list of whole
    numbers (``analysis.scales=[1e4]``), not an error saying 8.0 is not whole."""
    if not (dataclasses.is_dataclass(schema) and isinstance(node, DictConfig)):
        return

    def whole(value) -> bool:
        return isinstance(value, float) and math.isfinite(value) and value.is_integer()
    for key, kind in _hints(schema).items():
        value = node.get(key) if key in node else None
        if dataclasses.is_dataclass(kind):
            _whole_numbers(value, kind)
        elif int in (kind, *typing.get_args(kind)) and whole(value):
            node[key] = int(value)
        elif typing.get_origin(kind) is list and typing.get_args(kind) == (int,) and isinstance(value, ListConfig):
            node[key] = [int(v) if whole(v) else v for v in value]


def _check_switches(node, prefix: str, schema: type) -> None:
    """Refuse a number other than 0 or 1 where ``schema`` takes true or false: OmegaConf
    reads any other integer as true, so ``parallel.overlap_grad_reduce=2`` would pass."""
    if not (dataclasses.is_dataclass(schema) and isinstance(node, DictConfig)):
        return
    for key, kind in _hints(schema).items():
        value = node.get(key)
        if dataclasses.is_dataclass(kind):
            _check_switches(value, f"{prefix}.{key}", kind)
        elif kind is bool and isinstance(value, int | float) and not isinstance(value, bool) and value not in (0, 1):
            raise PrismError(f"{prefix}.{key}={value}: takes true or false (any number but 0 would read as true); "
                             f"give {prefix}.{key}=true or {prefix}.{key}=false",
                             field=f"{prefix}.{key}")


def _schema_at(schema: type, path: str):
    """The dataclass (or type) that the dotted ``path`` under ``schema`` names, or None."""
    for part in filter(None, path.split(".")):
        schema = _hints(schema).get(part) if dataclasses.is_dataclass(schema) else None
    return schema


@functools.cache
def _hints(schema: type) -> dict:
    """A dataclass's field types, resolved once per process (every profile a batch reads is
    checked against them)."""
    return typing.get_type_hints(schema)


def _field_type(schema: type, key: str) -> str:
    """The name of the type a setting takes: ``float`` for ``float | None``, and for an item
    of a list (``scales[0]``) the items' type."""
    base, _, item = key.partition("[")
    kind = _schema_at(schema, base)
    if item and typing.get_origin(kind) is list:
        kind = typing.get_args(kind)[0]
    taken = [k for k in typing.get_args(kind) if k is not type(None)] if typing.get_origin(kind) else [kind]
    return getattr(taken[0], "__name__", "") if len(taken) == 1 else ""


def _field_names(schema: type, path: str) -> list[str]:
    node = _schema_at(schema, path)
    return [f.name for f in dataclasses.fields(node)] if dataclasses.is_dataclass(node) else []


def is_setting(key: str) -> bool:
    """Whether the dotted ``key`` (``model.num_experts``) names a field of its group's
    dataclass, whether or not the group's chosen file writes it."""
    group, _, rest = key.partition(".")
    parent, _, leaf = rest.rpartition(".")
    return group in SCHEMAS and bool(leaf) and leaf in _field_names(SCHEMAS[group], parent)


def takes_text(key: str) -> bool:
    """Whether the setting ``key`` (``parallel.recompute_modules``) takes one text."""
    group, _, rest = key.partition(".")
    return is_setting(key) and _field_type(SCHEMAS[group], rest) == "str"


def read_yaml(path: Path) -> dict:
    """A YAML file of conf/ as plain values, read as :func:`OmegaConf.load` reads YAML
    (``1e12`` a float) without building a DictConfig of each file; a file that is not a
    UTF-8 YAML mapping is refused, naming it."""
    try:
        node = _load_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise PrismError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8", field=str(path)) from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PrismError(f"{path}: not valid YAML{at} ({problem}); fix the file", field=str(path)) from None
    if node is None:
        return {}
    if not isinstance(node, dict):
        raise PrismError(f"{path}: a YAML {type(node).__name__}, not a mapping of settings (key: value lines)",
                         field=str(path))
    return node


def check_own_name(group: str, name: str, node: dict, path: Path) -> None:
    """Refuse a ``conf/<group>`` file whose ``name:`` is not its file's name: a copy of
    h100-sxm.yaml saved as h100-pcie.yaml but still named h100-sxm would be reported as
    h100-sxm, read h100-sxm's models and have prism train replace them."""
    own = str(node.get("name", name))  # name: 2024 reads as a number
    if own != name:
        raise PrismError(f"{path}: name: {own} is not the file's name; write name: {name} (the name {group}={name} "
                         f"picks it by, and its results and models go under), or rename the file to {own}.yaml",
                         field=f"{group}.name")


def check_complete(group: str, node, path: Path) -> None:
    """Refuse a ``conf/<group>`` entry (``node``, composed from ``path``) that leaves a setting
    without a default unset, naming its file (:func:`section` would name only the key)."""
    missing = _unset(SCHEMAS[group], node)
    if missing:
        what = f"empty; every {group} file sets its settings" if not node else \
            f"no {', '.join(missing)}; every {group} file sets {'them' if len(missing) > 1 else 'it'}"
        raise PrismError(f"{path}: {what} (see the files of {SHIPPED_CONF / group})",
                         field=f"{group}.{missing[0]}")


def _unset(schema: type, node, prefix: str = "") -> list[str]:
    """The dotted settings of ``schema`` without a default that ``node`` does not write."""
    missing = []
    for f in dataclasses.fields(schema):
        kind = _hints(schema)[f.name]
        if f.name not in node:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                missing.append(prefix + f.name)
        elif dataclasses.is_dataclass(kind) and isinstance(node[f.name], Mapping):
            missing += _unset(kind, node[f.name], f"{prefix}{f.name}.")
    return missing


def no_option(group: str, name) -> PrismError:
    """The error for a ``conf/<group>`` entry that is not there: its options, the one a GPU
    name like "H100" or "DGX B200" would match, and how to use a YAML file of one's own."""
    text, options, own = str(name), ", ".join(group_options(group)), _own_conf()
    folder, where = (CONF_DIR / group, f" ({own})") if own else (f"conf/{group}", "")
    choose = (f"choose one of: {options}" if options else
              f"{folder} holds no .yaml file: point PRISM_CONF_DIR at a folder laid out like conf/ (a copy of "
              f"{SHIPPED_CONF}), or unset it to use that one")
    if text.endswith((".yaml", ".yml")) or "/" in text:
        return PrismError(f"{group}={text}: a file path; {group}= takes the name of a file in {folder}/{where} "
                          f"(copy yours there, or point PRISM_CONF_DIR at a folder laid out like conf/); {choose}",
                          field=group)
    if group == "hardware" and ("," in text or text.startswith("[")):
        return PrismError(f"hardware={text}: takes one profile's name, not a list (prism compare takes several: "
                          f"prism compare model=... hardware=[a,b]); {choose}", field=group)
    hint = f" (did you mean {match_hardware(text)}?)" if group == "hardware" and match_hardware(text) else ""
    if group == "model" and match_model(text) in group_options(group):  # "llama3.1-8b": a name the registry knows
        hint = f" (did you mean {match_model(text)}? {text!r} is one of the published names it lists)"
    return PrismError(f"{group}={text}: no {folder}/{text}.yaml{where}{hint}; {choose}", field=group)


def load_entry(group: str, name: str, schema: type):
    """One entry of a config group (``conf/<group>/<name>.yaml``), outside any composed config."""
    path = CONF_DIR / group / f"{name}.yaml"
    if not isinstance(name, str) or "/" in name or not path.is_file():  # "../model/x": no entry of this group
        raise no_option(group, name)
    node = read_yaml(path)
    check_own_name(group, name, node, path)
    check_complete(group, node, path)
    return section(OmegaConf.create({group: node}), group, schema)


def this_cpu() -> str:
    """This machine's CPU model as the kernel names it (``model name`` of /proc/cpuinfo),
    else what Python's platform module says: what a CPU's samples record as their device."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS gives one): what a
    sampler's threads or a measured job's ranks may take without timing each other."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def load_hardware(name: str) -> HardwareConfig:
    return load_entry("hardware", name, HardwareConfig)


def _norm(text) -> str:
    return re.sub(r"\s+", "", str(text)).lower()


def match_hardware(gpu: str) -> str | None:
    """The ``conf/hardware`` profile whose ``device.name`` or ``device.match`` entry best
    fits a GPU name (spaces and case ignored). The longest match wins, so
    ``NVIDIAGH200120GB`` is gh200 (``GH200``), not h200 (``H200``)."""
    key, best = _norm(gpu), (0, None)
    for name, candidates in _device_names():
        for candidate in candidates:
            c = _norm(candidate)
            if c and c in key and len(c) > best[0]:
                best = (len(c), name)
    return best[1]


def other_gpus_named(gpu: str) -> list[str]:
    """Profiles that ``gpu`` names besides the one :func:`match_hardware` finds, apart from
    it in the text ("A100 or H100"): a cell naming two GPUs says neither. A match inside
    the best one's (``H200`` in ``GH200``, ``H100`` in ``H100 PCIe``) is that same name."""
    key, best = _norm(gpu), match_hardware(gpu)
    spans = {}
    for name, candidates in _device_names():
        for candidate in candidates:
            c = _norm(candidate)
            at = key.find(c) if c else -1
            if at >= 0 and len(c) > spans.get(name, (0, 0))[1] - spans.get(name, (0, 0))[0]:
                spans[name] = (at, at + len(c))
    if best not in spans:
        return []
    lo, hi = spans[best]
    return sorted(n for n, (a, b) in spans.items() if n != best and (b <= lo or a >= hi))


def names_profile(gpu: str, name: str) -> bool:
    """Whether ``gpu`` is the profile ``name`` or one of its device names exactly (spaces
    and case ignored), not a longer name that merely contains one ("A100 40GB")."""
    return _norm(gpu) in {_norm(name), *(_norm(c) for n, candidates in _device_names() if n == name
                                         for c in candidates)}


def fits_profile(gpu: str, name: str) -> bool:
    """Whether one of profile ``name``'s device names or aliases is part of ``gpu`` (spaces
    and case ignored): an H100 PCIe fits a profile of its own (``match: [H100 PCIe]``) as it
    fits h100-sxm's catch-all ``H100``; it fits no B200 profile."""
    key = _norm(gpu)
    return any(_norm(c) and _norm(c) in key for n, candidates in _device_names() if n == name for c in candidates)


@functools.lru_cache(maxsize=1)
def _device_names() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each hardware profile's device name and ``match`` aliases, read once per process
    (batch predictions match a GPU name per row)."""
    entries = []
    for name in group_options("hardware"):
        device = read_yaml(CONF_DIR / "hardware" / f"{name}.yaml").get("device") or {}
        entries.append((name, (str(device.get("name", "")), *map(str, device.get("match") or []))))
    return tuple(entries)


def load_model(name: str) -> ModelConfig:
    return load_entry("model", name, ModelConfig)


def _model_key(text) -> str:
    """A model name as :func:`match_model` compares it: lower case, without a hub owner
    ("meta-llama/"), a version's v ("DeepSeek-V3") or separators ("-", "_", ".", spaces). A
    separator between two digits stays, as one mark: "GPT-3 1.3B" is not "GPT-3 13B", and
    "Llama 3.1 8B" is "llama3_1_8b" (NeMo's "llama31_8b" is an alias)."""
    text = re.sub(r"(?<![0-9])v(?=[0-9])", "", str(text).strip().lower().rsplit("/", 1)[-1])
    return re.sub(r"[\s._-]+", "", re.sub(r"(?<=[0-9])[\s._-]+(?=[0-9])", ":", text))


@functools.lru_cache(maxsize=4)
def _model_names(conf_dir: Path) -> dict[str, tuple[str, ...]]:
    """Each normalised name or alias of the ``<conf_dir>/model`` files, and the files it names."""
    found: dict[str, set[str]] = {}
    for name in sorted(p.stem for p in (conf_dir / "model").glob("*.yaml")):
        node = read_yaml(conf_dir / "model" / f"{name}.yaml")
        for spelling in (name, *map(str, node.get("aliases") or [])):
            found.setdefault(_model_key(spelling), set()).add(name)
    return {key: tuple(sorted(names)) for key, names in found.items()}


def match_model(text: str) -> str | None:
    """The ``conf/model`` entry a table's model cell names: its file name or one of its
    ``aliases``, case, separators, a hub owner and a version's v ignored ("Llama 3.1 405B",
    "meta-llama/Meta-Llama-3-70B", "deepseek_v3"). Exact names only: None where no entry
    matches, or where two do (ambiguous). Of the conf/ folder in use (``PRISM_CONF_DIR``)."""
    return _match_model(text, CONF_DIR)


@functools.lru_cache(maxsize=4096)
def _match_model(text: str, conf_dir: Path) -> str | None:
    names = _model_names(conf_dir).get(_model_key(text), ())
    return names[0] if len(names) == 1 else None


def as_model(value) -> ModelConfig:
    """A model spec, or a ``conf/model`` name loaded (the API takes either)."""
    if isinstance(value, str):
        return load_model(value)
    if not isinstance(value, ModelConfig):
        raise PrismError(f"model={value!r}: a ModelConfig (load_model('llama3-8b')) or a conf/model name",
                         field="model")
    return value


def as_hardware(value) -> HardwareConfig:
    """A hardware profile, or a ``conf/hardware`` name loaded (the API takes either)."""
    if isinstance(value, str):
        return load_hardware(value)
    if not isinstance(value, HardwareConfig):
        raise PrismError(f"hardware={value!r}: a HardwareConfig (load_hardware('h100-sxm')) or a conf/hardware "
                         f"name", field="hardware")
    return value


def as_layout(value) -> ParallelConfig:
    """A parallel layout: a ParallelConfig, a mapping of its fields, or None (one GPU)."""
    if value is None:
        return ParallelConfig()
    if isinstance(value, ParallelConfig):
        return value
    if isinstance(value, Mapping):
        known = {f.name for f in dataclasses.fields(ParallelConfig)}
        unknown = sorted(set(map(str, value)) - known)
        if unknown:
            raise PrismError(f"parallel.{unknown[0]}: not a layout field; choose among {', '.join(sorted(known))}",
                             field=f"parallel.{unknown[0]}")
        return ParallelConfig(**value)
    raise PrismError(f"layout={value!r}: a ParallelConfig (e.g. ParallelConfig(tp=8, pp=4)) or a dict of its "
                     f"fields", field="layout")

"""Frameworks as data: what a training framework does, read from ``conf/framework/<name>.yaml``.

A job's framework (``predict``'s ``framework``) decides how PRISM prices it: the host's calls
per operator call, whether the vocabulary is padded, the loss and attention kernels, how a
recompute name reads, whether weights stay fp32 under autocast, what a blank setting of a
published run defaults to, which layouts it refuses, the family the uncertainty model knows
it by, and the spellings its own configuration uses for each setting. Each of these is a
typed field of :class:`FrameworkSpec`, read from one YAML file per framework (a file may
name a ``base:`` whose settings it inherits and overrides). This module is the one place in
``predictor/`` that knows frameworks by name; everything else reads a spec's fields.

``load_framework("nemo")`` reads one spec (cached; an alias such as ``accelerate`` reads its
framework's file); :func:`known_frameworks` lists the names; :func:`table_framework` reads a
published table's framework cell. ``PRISM_CONF_DIR`` is honoured as
:mod:`predictor.core.profiles` honours it (its ``framework/`` folder, else the shipped one).
"""
from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from predictor.core import profiles
from predictor.core.errors import PrismError
from predictor.core.ops import DTYPE_BYTES

#: The attention kernels a framework's ``auto`` may pick (:data:`ParallelConfig.attention`'s choices).
AttentionKernel = Literal["flash", "cudnn", "unfused"]
#: The loss's op when it is not fused (``parallel.loss_fusion``).
LossKernel = Literal["vocab_parallel_cross_entropy", "cross_entropy"]
#: How the host issues a tensor-parallel reduction: inside the layer's own calls (``fused``),
#: or as a DTensor redistribution, a host op per pair of linear layers (``dtensor``).
TpReductions = Literal["fused", "dtensor"]
#: What a blank ``sequence_parallel`` cell of a published run takes.
SequenceParallelDefault = Literal["off", "with_tp"]
#: What a spec is: a framework users run, PRISM's reference workload, or the stand-in for
#: a framework PRISM does not recognise.
Role = Literal["framework", "reference", "unrecognised"]


@dataclass(frozen=True)
class HostTable:
    """The host's (forward, backward) calls per vocabulary call of one call table."""

    name: str
    tp_reductions: TpReductions
    calls: Mapping[str, tuple[int, int]]


@dataclass(frozen=True)
class Rule:
    """A layout a framework refuses (``message`` is the error) or reads otherwise than its
    name (``message`` is the note), when every ``when`` condition holds: a list is the
    values the setting takes, ``set`` a non-empty setting, ``{above: n}`` a count above n."""

    field: str
    when: Mapping[str, object]
    message: str

    def holds(self, par) -> bool:
        for key, want in self.when.items():
            value = getattr(par, key)
            if want == "set":
                ok = bool(value)
            elif isinstance(want, Mapping):
                ok = value > want["above"]
            else:
                ok = value in want
            if not ok:
                return False
        return True

    def text(self, par, framework: str) -> str:
        return self.message.format(framework=framework, **vars(par))


@dataclass(frozen=True)
class BlankDefault:
    """What a blank cell of a published run's column takes under a framework, why, and
    whose default the note names."""

    value: str
    why: str
    whose: str


@dataclass(frozen=True)
class FrameworkSpec:
    """One framework's behaviour (``conf/framework/<name>.yaml``; the file's comments cite
    where each comes from)."""

    name: str
    aliases: tuple[str, ...]
    display: str
    role: Role
    default: bool
    family: str
    uncertainty_feature: str
    uncertainty_code: int
    host: HostTable
    host_on_cpu: HostTable | None
    vocab_multiple: int
    vocab_parallel: bool
    loss_kernel: LossKernel
    attention: tuple[tuple[float, AttentionKernel], ...]
    userbuffers: bool
    recompute_aliases: Mapping[str, str]
    recompute_note: str | None
    master_weights: bool
    fp8_param_gather: bool
    grad_reduce_in_fp32: bool
    checkpoint_early_stop: bool
    refuses: tuple[Rule, ...]
    notes: tuple[Rule, ...]
    sequence_parallel_default: SequenceParallelDefault
    interleave_stages: int | None
    overlap_grad_reduce: bool
    overlap_tp_comm: bool
    moe_force_balance: bool
    loss_fusion: bool
    reads_loss_fusion: bool
    table_cells: tuple[str, ...]
    table_cells_unless: tuple[str, ...]
    table_order: int
    table_reads_as: str | None
    uncertainty_cells: tuple[str, ...]
    blank: Mapping[str, BlankDefault]
    blank_fallback: bool
    unknown_note: str | None
    spellings: Mapping[str, tuple[str, ...]]
    values: Mapping[str, Mapping[str, tuple[str, ...]]] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({}))
    requires: tuple[Rule, ...] = ()

    @property
    def reference(self) -> bool:
        return self.role == "reference"

    @property
    def grad_bytes(self) -> int:
        """Bytes of a main gradient, as the data-parallel reduction moves it and its buffer holds it."""
        return DTYPE_BYTES["float32" if self.grad_reduce_in_fp32 else "bfloat16"]

    def attention_kernel(self, compute_capability: float) -> AttentionKernel:
        """The attention kernel ``parallel.attention=auto`` runs on a device of ``compute_capability``."""
        kernel = self.attention[0][1]
        for since, name in self.attention:
            if compute_capability >= since:
                kernel = name
        return kernel

    def recompute(self, recompute: str) -> tuple[str, str | None]:
        """``parallel.recompute`` as this framework runs it, and a note where that differs."""
        if recompute in self.recompute_aliases:
            return self.recompute_aliases[recompute], self.recompute_note
        return recompute, None


def framework_dir() -> Path:
    """``conf/framework`` of :data:`predictor.core.profiles.CONF_DIR` where it holds one, else the shipped one."""
    return _framework_dir(profiles.CONF_DIR)


@functools.cache
def _framework_dir(conf: Path) -> Path:
    own = conf / "framework"
    return own if own.is_dir() else profiles.SHIPPED_CONF / "framework"


@functools.cache
def _raw(folder: Path) -> dict[str, dict]:
    """Every YAML of ``folder`` by its name, its ``base:`` chain merged in."""
    files = {p.stem: profiles.read_yaml(p) for p in sorted(folder.glob("*.yaml"))}
    for name, node in files.items():
        profiles.check_own_name("framework", name, node, folder / f"{name}.yaml")

    def merged(name: str, seen: tuple[str, ...] = ()) -> dict:
        node = files[name]
        base = node.get("base")
        if base is None:
            return dict(node)
        if base not in files or base in seen:
            raise PrismError(f"{folder / name}.yaml: base: {base} is no other framework file of {folder}",
                             field="framework.base")
        return _merge(merged(base, seen + (name,)), node)

    return {name: merged(name) for name in files}


#: A file's own identity, which a file naming it as its ``base`` does not inherit.
_OWN = ("name", "aliases", "default", "role", "display", "base")


def _merge(base: dict, over: dict) -> dict:
    """``base``'s settings, each top-level one that ``over`` writes replaced whole by its."""
    return {**{k: v for k, v in base.items() if k not in _OWN}, **{k: v for k, v in over.items() if k != "base"}}


def _choice(path: str, key: str, value, kind) -> object:
    allowed = get_args(kind)
    if value not in allowed:
        raise PrismError(f"{path}: {key}: {value!r} is not one of {', '.join(allowed)}", field=f"framework.{key}")
    return value


def _host(node: Mapping | None, path: str) -> HostTable | None:
    if node is None:
        return None
    calls = {op: (int(pair[0]), int(pair[1])) for op, pair in (node.get("calls") or {}).items()}
    return HostTable(str(node["table"]), _choice(path, "host.tp_reductions", node["tp_reductions"], TpReductions),
                     types.MappingProxyType(calls))


def _rules(items, path: str) -> tuple[Rule, ...]:
    return tuple(Rule(str(r["field"]), types.MappingProxyType(dict(r["when"])), str(r["message"]))
                 for r in items or ())


def _spec(name: str, node: dict, path: str) -> FrameworkSpec:
    """``node`` (one merged file) as a checked :class:`FrameworkSpec`."""
    try:
        defaults = node.get("defaults") or {}
        table = node.get("runs_table") or {}
        unc = node["uncertainty"]
        attention = tuple((float(since), _choice(path, "attention", kernel, AttentionKernel))
                          for since, kernel in node["attention"])
        recompute = node.get("recompute") or {}
        interleave = defaults.get("interleave_stages")
        return FrameworkSpec(
            name=name, aliases=tuple(str(a).lower() for a in node.get("aliases") or ()),
            display=str(node.get("display", name)), role=_choice(path, "role", node.get("role", "framework"), Role),
            default=bool(node.get("default", False)), family=str(node["family"]),
            uncertainty_feature=str(unc["feature"]), uncertainty_code=int(unc["code"]),
            host=_host(node["host"], path), host_on_cpu=_host(node.get("host_on_cpu"), path),
            vocab_multiple=int(node["vocab"]["multiple"]), vocab_parallel=bool(node["vocab"]["parallel"]),
            loss_kernel=_choice(path, "loss_kernel", node["loss_kernel"], LossKernel),
            attention=attention, userbuffers=bool(node.get("userbuffers", False)),
            recompute_aliases=types.MappingProxyType(dict(recompute.get("aliases") or {})),
            recompute_note=recompute.get("note"), master_weights=bool(node["master_weights"]),
            fp8_param_gather=bool(node.get("fp8_param_gather", False)),
            grad_reduce_in_fp32=bool(node.get("grad_reduce_in_fp32", True)),
            checkpoint_early_stop=bool(node.get("checkpoint_early_stop", False)),
            refuses=_rules(node.get("refuses"), path), notes=_rules(node.get("notes"), path),
            sequence_parallel_default=_choice(path, "defaults.sequence_parallel",
                                              defaults.get("sequence_parallel", "off"), SequenceParallelDefault),
            interleave_stages=None if interleave is None else int(interleave),
            overlap_grad_reduce=bool(defaults.get("overlap_grad_reduce", True)),
            overlap_tp_comm=bool(defaults.get("overlap_tp_comm", False)),
            moe_force_balance=bool(defaults.get("moe_force_balance", False)),
            loss_fusion=bool(defaults.get("loss_fusion", False)),
            reads_loss_fusion=bool(table.get("reads_loss_fusion", False)),
            table_cells=tuple(table.get("cells") or ()), table_cells_unless=tuple(table.get("cells_unless") or ()),
            table_order=int(table.get("order", 100)), table_reads_as=table.get("reads_as", name),
            uncertainty_cells=tuple(unc.get("cells") or ()),
            blank=types.MappingProxyType({k: BlankDefault(str(v["value"]), str(v["why"]), str(v["whose"]))
                                          for k, v in (table.get("blank") or {}).items()}),
            blank_fallback=bool(table.get("fallback", False)), unknown_note=table.get("unknown_note"),
            spellings=types.MappingProxyType({k: tuple(v) for k, v in (node.get("spellings") or {}).items()}),
            values=types.MappingProxyType({
                setting: types.MappingProxyType({str(value): tuple(str(w).lower() for w in words)
                                                 for value, words in (table or {}).items()})
                for setting, table in (node.get("values") or {}).items()}),
            requires=_rules(node.get("requires"), path))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise PrismError(f"{path}: {type(exc).__name__} {exc} reading a framework file; see the files of "
                         f"{profiles.SHIPPED_CONF / 'framework'}", field="framework") from None


@functools.cache
def _specs(folder: Path) -> dict[str, FrameworkSpec]:
    specs = {name: _spec(name, node, str(folder / f"{name}.yaml")) for name, node in _raw(folder).items()}
    _check(specs, folder)
    return specs


def _check(specs: dict[str, FrameworkSpec], folder: Path) -> None:
    """Refuse a folder whose files contradict each other: two files the same alias, a host
    table two ways, an uncertainty code two ways, no single default, reference or fallback."""
    owner: dict[str, str] = {}
    for spec in specs.values():
        for alias in spec.aliases:
            if alias in specs or owner.setdefault(alias, spec.name) != spec.name:
                raise PrismError(f"{folder}: alias {alias} of {spec.name} names another framework too",
                                 field="framework.aliases")
    tables: dict[str, HostTable] = {}
    codes: dict[str, int] = {}
    for spec in specs.values():
        for table in (spec.host, spec.host_on_cpu):
            if table and tables.setdefault(table.name, table) != table:
                raise PrismError(f"{folder}/{spec.name}.yaml: host table {table.name} differs from another file's; "
                                 f"name it otherwise", field="framework.host.table")
        if codes.setdefault(spec.uncertainty_feature, spec.uncertainty_code) != spec.uncertainty_code:
            raise PrismError(f"{folder}/{spec.name}.yaml: uncertainty feature {spec.uncertainty_feature} has another "
                             f"code in another file", field="framework.uncertainty")
        if spec.family not in specs and spec.family not in owner:
            raise PrismError(f"{folder}/{spec.name}.yaml: family: {spec.family} is no framework", field="framework")
    if sorted(codes.values()) != list(range(len(codes))):
        raise PrismError(f"{folder}: the uncertainty codes {sorted(codes.values())} are not 0 to {len(codes) - 1}",
                         field="framework.uncertainty")
    for what, pick in (("default: true", lambda s: s.default), ("role: reference", lambda s: s.reference),
                       ("role: unrecognised", lambda s: s.role == "unrecognised"),
                       ("runs_table.fallback: true", lambda s: s.blank_fallback)):
        if sum(map(pick, specs.values())) != 1:
            raise PrismError(f"{folder}: one framework file, not {sum(map(pick, specs.values()))}, sets {what}",
                             field="framework")


def setting_spellings(setting: str) -> tuple[str, ...]:
    """Every framework's configuration keys for ``setting`` (``spellings:``), longest first."""
    return _setting_spellings(framework_dir(), setting)


@functools.cache
def _setting_spellings(folder: Path, setting: str) -> tuple[str, ...]:
    words = {w for spec in _specs(folder).values() for w in spec.spellings.get(setting, ())}
    return tuple(sorted(words, key=lambda w: (-len(w), w)))


def value_spellings(setting: str) -> dict[str, tuple[str, ...]]:
    """Every framework's own spellings of ``setting``'s values (``values:``; NeMo's
    ``distributed_fused_adam`` for the distributed optimizer), as value -> spellings."""
    return dict(_value_spellings(framework_dir(), setting))


@functools.cache
def _value_spellings(folder: Path, setting: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    found: dict[str, dict[str, str]] = {}
    owner: dict[str, tuple[str, str]] = {}
    for spec in _specs(folder).values():
        for value, words in spec.values.get(setting, {}).items():
            for word in words:
                if owner.setdefault(word, (value, spec.name))[0] != value:
                    raise PrismError(f"{folder}/{spec.name}.yaml: values: {setting}: {word!r} is {value} here and "
                                     f"{owner[word][0]} in {owner[word][1]}.yaml", field="framework.values")
                found.setdefault(value, {})[word] = value
    return tuple((value, tuple(words)) for value, words in found.items())


def _all() -> dict[str, FrameworkSpec]:
    return _specs(framework_dir())


def known_frameworks() -> list[str]:
    """The frameworks' names (their files'), sorted."""
    return sorted(_all())


def all_frameworks() -> list[FrameworkSpec]:
    """Every framework's spec, in :func:`known_frameworks`' order."""
    specs = _all()
    return [specs[name] for name in sorted(specs)]


def load_framework(name: str | None) -> FrameworkSpec:
    """The spec of framework ``name`` (case ignored; an alias reads its framework's file; None
    (or blank) is the default framework). An unknown name is one :class:`PrismError` on ``framework``
    listing the known names."""
    if name is None or name == "":
        return default_framework()
    return _load(framework_dir(), str(name))


@functools.cache
def _load(folder: Path, name: str) -> FrameworkSpec:
    specs = _specs(folder)
    aliases = {alias: spec.name for spec in specs.values() for alias in spec.aliases}
    key = name.strip().lower()
    key = aliases.get(key, key)
    if key not in specs:
        known = ", ".join(sorted(specs))
        families = "; ".join(f"{s.name} = {s.display}" for _, s in sorted(specs.items()) if s.display != s.name)
        also = ", ".join(f"{a} = {n}" for a, n in sorted(aliases.items()))
        raise PrismError(f"framework={name}: choose the family that runs the job, one of {known} ({families}; "
                         f"aliases: {also})", field="framework")
    return specs[key]


def _one(pick) -> FrameworkSpec:
    return next(s for s in all_frameworks() if pick(s))


def default_framework() -> FrameworkSpec:
    """The framework a blank ``framework`` takes (the file with ``default: true``)."""
    return _one(lambda s: s.default)


def reference_framework() -> FrameworkSpec:
    """PRISM's reference workload (:mod:`sampling.reference`; the file with ``role: reference``)."""
    return _one(lambda s: s.reference)


def unrecognised_framework() -> FrameworkSpec:
    """The stand-in for a framework PRISM does not know (``role: unrecognised``)."""
    return _one(lambda s: s.role == "unrecognised")


def host_tables() -> dict[str, HostTable]:
    """Every host-call table the frameworks name, by its name (on a CPU: the reference's ``host_on_cpu``)."""
    return _host_tables(framework_dir())


@functools.cache
def _host_tables(folder: Path) -> dict[str, HostTable]:
    return {t.name: t for s in _specs(folder).values() for t in (s.host, s.host_on_cpu) if t is not None}


def uncertainty_features() -> tuple[str, ...]:
    """The uncertainty model's framework feature names, in the order of their codes."""
    codes = {s.uncertainty_feature: s.uncertainty_code for s in all_frameworks()}
    return tuple(sorted(codes, key=codes.get))


def uncertainty_code(name: str | None) -> int:
    """The uncertainty model's code of framework ``name``; a name no file knows is the unrecognised one's."""
    try:
        return load_framework(name).uncertainty_code
    except PrismError:
        return unrecognised_framework().uncertainty_code


def _names(low: str, words) -> bool:
    return any(w in low for w in words)


def table_framework(text) -> FrameworkSpec | None:
    """The framework a published table's framework cell names, read by the files' ``runs_table.cells``
    (in their ``order``), as the table reader runs it (``runs_table.reads_as``); None where no file's
    cells match or the match is read as no framework of its own."""
    low = str(text or "").lower()
    for spec in sorted(all_frameworks(), key=lambda s: (s.table_order, s.name)):
        if spec.table_cells and _names(low, spec.table_cells) and not _names(low, spec.table_cells_unless):
            return load_framework(spec.table_reads_as) if spec.table_reads_as else None
    return None


def uncertainty_framework(text) -> str:
    """The uncertainty model's framework feature of a published table's framework cell: a
    file's ``uncertainty.cells`` first, then the table's reading (:func:`table_framework`),
    else the unrecognised one's. A blank cell is the default framework's (:func:`default_framework`),
    as its composition is."""
    low = str(text or "").lower()
    if not low.strip():
        return default_framework().uncertainty_feature
    for spec in sorted(all_frameworks(), key=lambda s: (s.table_order, s.name)):
        if spec.uncertainty_cells and _names(low, spec.uncertainty_cells):
            return spec.uncertainty_feature
    spec = table_framework(text)
    return (spec or unrecognised_framework()).uncertainty_feature


def row_framework(text) -> str:
    """The framework whose file prices a published table's row, by its framework cell: the
    file the cell names (:func:`table_framework`) where that file is of the row's family
    (:func:`uncertainty_framework`), so a NeMo or Megatron-Bridge row runs its recipes' settings
    (fp8 weight gathers, the gradients' dtype) as ``prism predict framework=nemo`` does; else
    the family (a Megatron-DeepSpeed row is DeepSpeed's, whose table defaults are Megatron-LM's)."""
    fam = uncertainty_framework(text)
    own = table_framework(text) if str(text or "").strip() else None
    return own.name if own is not None and own.family == fam else fam


def blank_default(column: str, spec: FrameworkSpec | None) -> BlankDefault:
    """What a blank ``column`` of a published run takes under ``spec`` (None: unrecognised):
    its own entry, else the fallback file's (``runs_table.fallback: true``)."""
    if spec is not None and column in spec.blank:
        return spec.blank[column]
    return _one(lambda s: s.blank_fallback).blank[column]

"""A :class:`Job`: what is trained, on what, by which framework, laid out how, on how many
GPUs. The one input of every verb (``prism predict``, ``compare``, ``search``,
``variability``, ``validate``, ``calibrate``) and of each predict-batch row; the
:class:`~predictor.engine.predictor.Predictor` turns it into a workload, a step-time
distribution and a report.

:meth:`Job.of` builds one from names, mappings or specs with the checks the verbs have
always made (:func:`~predictor.core.profiles.as_model`, :func:`check_gpus`,
:func:`check_framework`, :func:`~predictor.core.layout.resolve_layout`,
:func:`~predictor.core.layout.validate_layout`), each failure one
:class:`~predictor.core.errors.PrismError` naming the field.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field

from predictor.core.errors import PrismError
from predictor.core.framework import default_framework, known_frameworks, load_framework
from predictor.core.layout import MAX_GPUS, resolve_layout, validate_layout
from predictor.core.profiles import as_hardware, as_layout, as_model
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig


def check_gpus(value) -> int | None:
    """``gpus`` as a positive integer, or None where it is not set (dp·tp·pp·cp then)."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():  # gpus=1e4 as Hydra reads it
        value = int(value)
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or not 1 <= value <= MAX_GPUS:
        raise PrismError(f"gpus={value!r}: the job's GPU count, a whole number from 1 to {MAX_GPUS:,}, e.g. "
                         f"gpus=512 (unset: dp·tp·pp·cp of the layout)", field="gpus")
    return int(value)


def check_framework(value) -> str:
    """``framework`` as a framework ``conf/framework/`` knows (an alias too; None: the default
    framework's name), refused with the known names otherwise
    (:func:`predictor.core.framework.load_framework`)."""
    if value is None:
        return default_framework().name
    if not isinstance(value, str) or not value:
        raise PrismError(f"framework={value}: choose the family that runs the job, one of "
                         f"{', '.join(known_frameworks())}", field="framework")
    load_framework(value)
    return value


def _values(spec) -> tuple:
    """A spec's field values as a hashable tuple (nested specs as their repr)."""
    out = []
    for v in vars(spec).values():
        try:
            hash(v)
        except TypeError:
            v = repr(v)
        out.append(v)
    return tuple(out)


@dataclass(frozen=True, eq=False)
class Job:
    """One training job. ``parallel`` is the layout resolved (dp from ``gpus``, the default
    batch, the framework's settings); ``given`` the layout as the user wrote it, which the
    report's notes compare with (what was left to its default). ``hardware_key`` names the
    hardware's identity where a caller knows it (a runs-table row's profile and variant);
    by default the profile's values."""

    model: ModelConfig
    hardware: HardwareConfig
    parallel: ParallelConfig
    gpus: int
    framework: str  # a conf/framework name (core.framework); Job.of resolves None to the default
    given: ParallelConfig | None = None
    hardware_key: tuple | None = field(default=None, repr=False)
    models_from: str | None = field(default=None, repr=False)  # the profile whose models price it (None: its own)

    @classmethod
    def of(cls, model, hardware, layout=None, gpus=None, framework: str | None = None) -> Job:
        """A job from a model and hardware (specs or ``conf/`` names), a layout (a
        ParallelConfig, a mapping of its fields, or None: one GPU) and a GPU count (None:
        dp·tp·pp·cp). Raises :class:`PrismError` naming the field that cannot be."""
        model, hardware, layout = as_model(model), as_hardware(hardware), as_layout(layout)
        framework = check_framework(framework)
        par = resolve_layout(layout, check_gpus(gpus), framework)
        validate_layout(model, par, par.world_size)
        return cls(model, hardware, par, par.world_size, framework, layout)

    @property
    def layout(self) -> ParallelConfig:
        """The layout as given (the resolved one where none was kept)."""
        return self.given if self.given is not None else self.parallel

    @property
    def pricing_key(self) -> tuple:
        """What the operator quantiles of the job's calls depend on beside the calls: the hardware."""
        return self.hardware_key if self.hardware_key is not None else ("spec", repr(self.hardware))

    @property
    def key(self) -> tuple:
        """Every value the job's prediction depends on: equal keys predict alike."""
        return (_values(self.model), _values(self.parallel), self.pricing_key, self.gpus, self.framework)

    def __eq__(self, other) -> bool:
        return isinstance(other, Job) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

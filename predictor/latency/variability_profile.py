"""Which variability a prediction uses: the sigmas measured on the hardware, where a
``variability.json`` lies beside its models, else the figures cited in its profile.

The composer's variability components (:mod:`predictor.engine.draws`) are lognormal
sigmas: ``spatial`` (per GPU, persistent), ``temporal`` (per GPU and step) and
``regime`` (one per step, shared by every collective). ``conf/hardware/<name>.yaml``
cites them (``variability.spatial_cv``, ``temporal_cv``, ``comm_regime_cv``); ``prism
train`` fits them from the repeats of the sample store
(:mod:`predictor.latency.variability_fit`) and writes ``<models>/<hardware>/variability.json``
with the models. :func:`variability_of` is the one place that decides which applies:
the composer, the search's screen and the reports all ask it.

``variability.json``::

    {"format": 1, "source": "measured", "hardware": "local-cpu",
     "sigmas": {"temporal": {"sigma": ..., "interval90": [lo, hi], "shapes": ..., "repeats": ...,
                             "basis": "compute ops' repeats"}, "spatial": {...}, "regime": {...}},
     "method": "...", "samples": {"run_ids": [...], "rows": 9140, "rows_hash": "..."},
     "created": "2026-11-22T..."}

Failures, restarts and checkpoints (``interruptions_per_gpu_day`` ...) stay the
profile's: repeats of operators say nothing of them.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from predictor.core.errors import PrismError
from predictor.core.files import write_atomically
from predictor.core.specs import HardwareConfig, VariabilitySpec

if TYPE_CHECKING:
    from predictor.latency.artifacts import ModelSet

VARIABILITY_FILE = "variability.json"
FORMAT = 1
#: The composer's components and the profile's key citing each.
COMPONENTS = {"temporal": "temporal_cv", "spatial": "spatial_cv", "regime": "comm_regime_cv"}


@dataclass(frozen=True)
class Sigma:
    """One fitted lognormal sigma, with its bootstrap 90% interval (shapes resampled) and
    how many shapes and timed repeats it rests on."""

    sigma: float
    interval90: tuple[float, float]
    shapes: int
    repeats: int
    basis: str  # what it was fitted on, in words


@dataclass(frozen=True)
class MeasuredVariability:
    """The sigmas fitted on one hardware's sample store (``variability.json``)."""

    hardware: str
    sigmas: dict[str, Sigma]  # those of temporal, spatial, regime the samples could show
    method: str
    samples: dict  # run_ids, rows, rows_hash: the repeats it came from
    created: str

    def to_dict(self) -> dict:
        return {"format": FORMAT, "source": "measured", "hardware": self.hardware,
                "sigmas": {k: asdict(s) for k, s in self.sigmas.items()}, "method": self.method,
                "samples": self.samples, "created": self.created}


def write_variability(directory, measured: MeasuredVariability) -> Path:
    """Write ``measured`` to ``directory/variability.json`` atomically (temporary file, rename)."""
    return write_atomically(Path(directory) / VARIABILITY_FILE,
                            lambda tmp: tmp.write_text(json.dumps(measured.to_dict(), indent=1)))


def read_variability(directory) -> MeasuredVariability | None:
    """The measured variability stored in ``directory``, or None where there is none."""
    path = Path(directory) / VARIABILITY_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT or data.get("source") != "measured":
            raise ValueError(f"format {data.get('format')}, source {data.get('source')!r}; "
                             f"this PRISM reads format {FORMAT}, source 'measured'")
        unknown = set(data["sigmas"]) - set(COMPONENTS)
        if unknown:
            raise ValueError(f"unknown component(s) {sorted(unknown)}, not one of {list(COMPONENTS)}")
        sigmas = {k: Sigma(**{**v, "interval90": tuple(v["interval90"])}) for k, v in data["sigmas"].items()}
        bad = [k for k, v in sigmas.items() if not 0 <= v.sigma < float("inf")]
        if bad:
            raise ValueError(f"sigma of {bad[0]} is {sigmas[bad[0]].sigma}, not a finite number >= 0")
        return MeasuredVariability(data["hardware"], sigmas, data["method"], data["samples"], data["created"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # AttributeError: JSON but no object
        raise PrismError(f"{path}: not a measured variability file ({exc}); refit it with prism train "
                         f"(or delete it to use the profile's cited figures)", field=str(path)) from None


@dataclass(frozen=True)
class Variability:
    """The variability a prediction uses: the profile's ``spec`` with the sigmas of
    ``measured`` in place, where it applies."""

    spec: VariabilitySpec
    measured: MeasuredVariability | None

    def to_dict(self) -> dict:
        """What a report says: the source, each sigma and, when measured, its n and interval."""
        fitted = self.measured.sigmas if self.measured else {}
        return {"source": "measured" if fitted else "cited",
                **{k: {"sigma": getattr(self.spec, key), "source": "measured" if k in fitted else "cited",
                       **({"shapes": fitted[k].shapes, "repeats": fitted[k].repeats,
                           "interval90": list(fitted[k].interval90), "basis": fitted[k].basis}
                          if k in fitted else {})}
                   for k, key in COMPONENTS.items()}}


def variability_of(hardware: HardwareConfig, models: ModelSet | None) -> Variability:
    """The variability of ``hardware``: the sigmas measured with ``models`` when they were
    measured on this very hardware (a profile that borrows another's models,
    ``models_from``, keeps its own cited figures: variability is the machine's, not the
    die's), else the profile's cited ones."""
    measured = models.variability if models is not None else None
    if measured is None or measured.hardware != hardware.name:
        return Variability(hardware.variability, None)
    spec = replace(hardware.variability,
                   **{key: measured.sigmas[k].sigma for k, key in COMPONENTS.items() if k in measured.sigmas})
    return Variability(spec, measured)

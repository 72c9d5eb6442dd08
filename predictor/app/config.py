"""Configuration from the command line: Hydra composes ``conf/`` with ``key=value``
overrides into one :class:`omegaconf.DictConfig`; :func:`predictor.core.profiles.section`
turns one group into a checked dataclass. Every failure becomes one :class:`PrismError`
that names the key and the fix. This is the only module that imports Hydra.
"""
from __future__ import annotations

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from predictor.core.errors import PrismError
from predictor.core.profiles import CONF_DIR, GROUPS, group_options


def _check_override(text: str) -> None:
    try:
        OverridesParser.create().parse_overrides([text])
    except HydraException:
        raise PrismError(
            f"malformed override {text!r}: write key=value, e.g. sampling.budget_s=60, "
            f"hardware=local-cpu or sampling.ops=[gemm,attention]") from None


def load_config(overrides: list[str] = ()) -> DictConfig:
    """Compose ``conf/config.yaml`` with Hydra overrides (``key=value`` strings)."""
    for text in overrides:
        _check_override(text)
        key, _, value = text.lstrip("+~").partition("=")
        if key in GROUPS and value not in group_options(key):
            raise PrismError(f"{key}={value}: no conf/{key}/{value}.yaml; "
                             f"choose one of: {', '.join(group_options(key))}", field=key)
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            return compose("config", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as exc:
        cause = exc.__cause__
        if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
            raise PrismError(f"{cause.full_key}: no such setting; `prism <verb> --show-config` "
                             f"lists the settings (to add a new key anyway: +{cause.full_key}=...)",
                             field=cause.full_key) from None
        raise PrismError(f"configuration: {' '.join(str(exc).split())}") from None

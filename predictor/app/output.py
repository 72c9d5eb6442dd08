"""What a verb prints: a result as JSON (``--json`` or ``output=json``) or as its table,
with the ``plot`` line of the verbs that draw; and a refusal, one line on stderr (and a
JSON error on stdout where stdout is read as JSON)."""
from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict

from predictor.core.errors import PrismError


def as_json(payload) -> str:
    """``payload`` as JSON, indented for a terminal and compact for a pipe or file (C's encoder:
    a search's thousands of layouts print in a tenth of the time); NaN and infinity are not
    JSON: one error naming where, never an invalid document."""
    try:
        return json.dumps(payload, indent=2 if sys.stdout.isatty() else None, default=str, allow_nan=False)
    except ValueError:
        where = non_finite(payload)
        raise PrismError(f"{where}: not a finite number, so there is no valid JSON to print; an input is out of "
                         f"range: check the model, hardware and layout values", field=where) from None


def show(cfg, payload, table: str) -> None:
    """``payload`` as JSON where ``cfg.output`` asks for it, else ``table``."""
    print(as_json(payload) if cfg.output == "json" else table)


def non_finite(value, where: str = "result") -> str | None:
    """The path (``result.step_time_s.p50``) of the first NaN or infinity in ``value``."""
    if isinstance(value, float):
        return None if math.isfinite(value) else where
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list | tuple) else ()
    for key, item in items:
        found = non_finite(item, f"{where}.{key}" if isinstance(value, dict) else f"{where}[{key}]")
        if found:
            return found
    return None


def show_result(cfg, result, text: str, png, figure, width: int, hint: str) -> int:
    """Print a verb's ``result``, as JSON or as ``text`` and a ``plot`` line aligned to its
    table's labels (``width``), after saving ``figure(result)`` to ``png`` where asked;
    ``hint`` says what ``plot=`` would draw."""
    from predictor.app.plots import save_figure
    if png:
        save_figure(figure(result), png)
    plot = str(png) if png else None
    show(cfg, result.to_dict() | {"plot": plot}, f"{text}\n{'plot':<{width}}{plot or hint}")
    return 0


def show_reports(reports, json_out: bool) -> None:
    """One import report, or a list of them, as JSON (the same shape) or as tables."""
    many = reports if isinstance(reports, list) else [reports]
    if json_out:
        payload = [asdict(r) for r in many]
        print(as_json(payload if isinstance(reports, list) else payload[0]))
    else:
        print("\n".join(r.table() for r in many))


def refused(verb: str, exc: PrismError, wants_json: bool) -> int:
    """Print a refusal of ``prism verb`` and return its exit code, 2."""
    print(f"prism {verb}: error: {exc}", file=sys.stderr)
    if wants_json:  # a script reading stdout as JSON (prism ... --json | jq) gets the error too
        print(json.dumps({"error": str(exc), "field": exc.field}))
    return 2


def pd_table(rows: list[dict]) -> str:
    import pandas as pd
    return pd.DataFrame(rows).to_string(index=False)

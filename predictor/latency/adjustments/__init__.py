"""The pricing adjustments, in the order the pricer applies them (:mod:`predictor.latency.pricer`).

Each is one file of this package holding its fit at training time and its application to
a call's quantiles, behind :class:`~predictor.latency.adjustments.base.Adjustment`; its
docstring names its mechanism. Adding one is that file and its entry below (an import and
a line of :data:`ADJUSTMENTS`); ``tests/latency/test_adjustments_contract.py`` checks every
registered one. The order matters: a stand-in replaces a prior before the floors and
factors that follow scale it.

The last three exist for the CPU testbed alone (``testbed_only``), each naming the test
that would retire it; their measuring code is in ``sampling/cpu/``.
"""
from __future__ import annotations

from predictor.latency.adjustments.attention_kernel import AttentionKernel
from predictor.latency.adjustments.attention_sfu import AttentionSfu
from predictor.latency.adjustments.backward_entry import BackwardEntry
from predictor.latency.adjustments.base import Adjustment, Batch, Params
from predictor.latency.adjustments.co_run import CoRun
from predictor.latency.adjustments.collective_gap import CollectiveGap
from predictor.latency.adjustments.grouped_gemm import GroupedGemm
from predictor.latency.adjustments.one_node_floor import OneNodeFloor
from predictor.latency.adjustments.sm_margin import SmMargin

#: Every adjustment, in the order applied (and fitted: a fit sees the rows the ones before
#: it prepared).
ADJUSTMENTS: tuple[Adjustment, ...] = (
    AttentionKernel(),
    AttentionSfu(),
    GroupedGemm(),
    OneNodeFloor(),
    SmMargin(),
    CoRun(),
    CollectiveGap(),
    BackwardEntry(),
)
#: The same, by name.
BY_NAME: dict[str, Adjustment] = {a.name: a for a in ADJUSTMENTS}
#: The marks they read off a call's shape (no op model's feature), each with its value where a call has none.
MARKS: dict[str, object] = {m: default for a in ADJUSTMENTS for m, default in a.marks.items()}

__all__ = ["ADJUSTMENTS", "BY_NAME", "MARKS", "Adjustment", "Batch", "Params"]

"""The device mesh of a layout: every parallel axis's group size, the order ranks are
numbered in, and where a group's ranks sit on nodes.

One object owns what used to be written by hand wherever it was needed (``tp * cp * dp``
GPUs per stage, the dp group's stride, the nodes of a stage), as torchtitan's
``ParallelDims`` does. Ranks are numbered as Megatron-Core numbers them by default
(``order="tp-cp-ep-dp-pp"``, megatron/core/parallel_state.py): tp innermost, then cp,
dp, pp. Expert parallelism does not add ranks: the experts of a pipeline stage have
their own mesh over the same tp·cp·dp ranks, numbered etp innermost, then ep, then the
experts' data-parallel axis (Megatron-Core's ``expert_decoder_rank_generator``, order
"tp-ep-dp" with tp = etp), so ``ep * etp`` divides ``tp * cp * dp`` and the
expert-data-parallel group has ``tp * cp * dp / (ep * etp)`` ranks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from predictor.core.specs import HardwareConfig

#: Axes that number ranks, innermost first; ep lives inside dp·cp (module docstring).
ORDER = ("tp", "cp", "dp", "pp")
#: Strides of the experts' axes in their own mesh (etp innermost, then ep, then expert_dp).
EXPERT_STRIDE = {"etp": lambda m: 1, "ep": lambda m: m.etp, "expert_dp": lambda m: m.etp * m.ep}


def group_topology(size: int, stride: int, gpus_per_node: int) -> tuple[int, int]:
    """(ranks per node, nodes spanned) of a group of ``size`` ranks spaced ``stride`` apart."""
    per_node = max(1, min(size, gpus_per_node // stride)) if stride < gpus_per_node else 1
    return per_node, math.ceil(size / per_node)


def tp_span_note(tp: int, hw: HardwareConfig) -> str | None:
    """Where a tensor-parallel group of ``tp`` ranks (numbered innermost) spans NVLink
    domains of ``hw``: its collectives, two to four per layer and pass, then cross the
    scale-out network (``prism predict`` and ``prism compare`` say so)."""
    domain = hw.nvlink_domain
    spans = group_topology(tp, 1, domain)[1]
    if spans == 1:
        return None
    where = "nodes" if domain == hw.node.gpus_per_node else "NVLink domains"
    return f"tp={tp} spans {spans} {where} of {domain} GPU(s): tensor-parallel collectives cross the inter-node network"


@dataclass(frozen=True)
class Mesh:
    """Group sizes of every parallel axis of one job and their placement on nodes of
    ``gpus_per_node`` GPUs. Build it with :meth:`of` from a validated layout."""

    tp: int
    cp: int
    dp: int
    pp: int
    ep: int
    gpus_per_node: int
    etp: int = 1  # expert tensor parallelism (Megatron-Core --expert-tensor-parallel-size)
    # GPUs of one NVLink domain (0: one node). Communication is placed by domain, not by
    # node: a group inside one domain talks over NVLink even across the 4-GPU trays of a
    # GB200/GB300 NVL72 rack; only groups spanning domains cross the scale-out network.
    nvlink_domain: int = 0

    @classmethod
    def of(cls, layout, gpus_per_node: int, nvlink_domain: int | None = None) -> Mesh:
        """The mesh of a :class:`~predictor.core.specs.ParallelConfig` (validated by
        :func:`predictor.core.layout.validate_layout`) on nodes of ``gpus_per_node`` GPUs
        in NVLink domains of ``nvlink_domain`` GPUs (None: one node,
        :attr:`predictor.core.specs.HardwareConfig.nvlink_domain`)."""
        return cls(layout.tp, layout.cp, layout.dp, layout.pp, layout.ep, gpus_per_node,
                   etp=layout.etp, nvlink_domain=nvlink_domain or 0)

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def gpus_per_stage(self) -> int:
        """The GPUs of one pipeline stage: every one of them must finish before the stage does."""
        return self.tp * self.cp * self.dp

    @property
    def grad_group(self) -> int:
        """Ranks a dense weight's gradient is reduced over: data and context ranks."""
        return self.dp * self.cp

    @property
    def grad_topology(self) -> tuple[int, int]:
        """(ranks per NVLink domain, domains spanned) of the :attr:`grad_group`: the cp and dp
        ranks of one tp rank and stage, tp apart (cp inside dp, :data:`ORDER`), so a node
        holds the group's ranks of both axes and drives as many NICs across nodes."""
        return group_topology(self.grad_group, self.tp, self.domain)

    @property
    def expert_dp(self) -> int:
        """Ranks an expert's gradient is reduced over (Megatron-Core's expert-data-parallel
        group): tp·cp·dp / (ep·etp)."""
        return self.tp * self.cp * self.dp // (self.ep * self.etp)

    def size(self, axis: str) -> int:
        return getattr(self, axis)

    def stride(self, axis: str) -> int:
        """Distance between consecutive ranks of one ``axis`` group (ep: etp apart in the
        experts' mesh; expert_dp: ep·etp apart)."""
        if axis in EXPERT_STRIDE:
            return EXPERT_STRIDE[axis](self)
        inner = ORDER[:ORDER.index(axis)]
        return math.prod(self.size(a) for a in inner)

    @property
    def domain(self) -> int:
        """GPUs of one NVLink domain: ``nvlink_domain``, else one node."""
        return self.nvlink_domain or self.gpus_per_node

    def topology(self, axis: str) -> tuple[int, int]:
        """(ranks per NVLink domain, domains spanned) of one ``axis`` group; for pp, of the
        two neighbouring stages a pipeline send connects. A domain is a node except on
        multi-node NVLink systems (NVL72: 72 GPUs, 18 nodes), so the pair reads as the
        collectives' (ranks per node, nodes) of the sample store, where a "node" is what
        one NVLink fabric joins: inside it the intra-node (NVLink) bandwidth applies."""
        size = 2 if axis == "pp" else self.size(axis)
        return group_topology(size, self.stride(axis), self.domain)

    def stage_of_rank(self, rank: int) -> int:
        return rank // self.gpus_per_stage

    def stage_nodes(self, stage: int) -> list[int]:
        """The nodes holding ranks of pipeline stage ``stage``."""
        per_stage, gpn = self.gpus_per_stage, self.gpus_per_node
        return list(range(stage * per_stage // gpn, ((stage + 1) * per_stage - 1) // gpn + 1))

    def gpus_per_stage_on(self, nodes) -> tuple[int, ...]:
        """How many GPUs of each pipeline stage lie on the given nodes."""
        counts = [0] * self.pp
        for n in nodes:
            for rank in range(n * self.gpus_per_node, min((n + 1) * self.gpus_per_node, self.world_size)):
                counts[self.stage_of_rank(rank)] += 1
        return tuple(counts)

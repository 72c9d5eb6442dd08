"""A collective across nodes priced by the network prior takes no less than the models
measured of the same message among one node's ranks.

Mechanism: across nodes a collective runs the one-node part too, or moves its bytes over
slower links: NCCL's ring and tree algorithms pass every node's ranks over its intra-node
links as well as the inter-node ones (NCCL documentation, environment variable ``NCCL_ALGO``;
nccl-tests doc/PERFORMANCE.md, bus bandwidth). No measurement of ours isolates it. Where the models were
measured inside one node only (manifest ``collective_scope`` ``intra-node``) on this
profile's own network, a collective spanning nodes rests on the network prior, and the prior
is rough: without this floor a CPU job of two hosts priced its all-reduce under the measured
one-host time, and came out faster than the one-host job.
"""
from __future__ import annotations

import numpy as np

from predictor.core.ops import OPS, Call
from predictor.latency.adjustments.base import Adjustment, Batch


class OneNodeFloor(Adjustment):
    name = "one_node_floor"
    mechanism = ("NCCL documentation, NCCL_ALGO (ring and tree cross the intra-node links too); "
                 "nccl-tests doc/PERFORMANCE.md")

    def applies(self, batch: Batch, params) -> np.ndarray:
        models = batch.models
        if not (OPS[batch.op].collective and models is not None and models.has(batch.op, batch.pass_)
                and models.manifest.get("collective_scope") == "intra-node"
                and models.manifest.get("collective_network") == batch.hw.network.name):
            return np.zeros(len(batch), bool)
        return batch.prior & (batch.frame["nodes"] > 1) & (batch.frame["ranks_per_node"] > 1)

    def apply(self, batch: Batch, q: np.ndarray, params, which: np.ndarray) -> np.ndarray:
        one_node = batch.rows(which)
        one_node.update(group_size=one_node["ranks_per_node"], nodes=np.ones(int(which.sum()), int))
        measured = batch.models.models[(batch.op, batch.pass_)].predict(one_node, batch.models.hw)
        return np.maximum(q, measured[:, batch.quantile_columns()])

    def example_calls(self) -> tuple[str, list[Call]]:
        return "local-cpu", [Call.of("all_reduce", "step", {"message_bytes": b, "group_size": 4}, role="dp", topology=t)
                             for b in (4096, 1 << 20) for t in ((2, 2), (4, 1))]

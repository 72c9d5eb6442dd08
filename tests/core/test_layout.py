"""Layout rules (predictor.core.layout) and the mesh that owns group sizes and placement."""
from dataclasses import replace

import pytest

from predictor.core.errors import PrismError
from predictor.core.layout import resolve_layout, validate_layout
from predictor.core.mesh import Mesh
from predictor.core.profiles import load_model
from predictor.core.specs import ParallelConfig

LLAMA = load_model("llama3-70b")


def test_zero_bubble_is_refused_with_its_field():
    with pytest.raises(PrismError) as err:
        validate_layout(LLAMA, ParallelConfig(tp=8, pp=4, dp=2, global_batch_size=64, schedule="zero_bubble"))
    assert err.value.field == "parallel.schedule"
    assert "2401.10241" in str(err.value) and "1f1b" in str(err.value)


def test_expert_parallelism_needs_experts_and_fits_the_experts_mesh():
    """Megatron-Core's expert mesh: ep·etp divides a stage's tp·cp·dp ranks, ep the experts."""
    with pytest.raises(PrismError) as err:
        validate_layout(LLAMA, ParallelConfig(tp=8, dp=4, ep=2, global_batch_size=16))
    assert err.value.field == "parallel.ep" and "no experts" in str(err.value)
    moe = replace(LLAMA, num_experts=16, top_k=2)
    validate_layout(moe, ParallelConfig(tp=8, dp=4, cp=2, ep=8, global_batch_size=16, sequence_parallel=True))
    validate_layout(moe, ParallelConfig(tp=8, dp=2, ep=4, etp=4, global_batch_size=16, sequence_parallel=True))
    for bad in (ParallelConfig(tp=8, dp=2, ep=4, etp=8, global_batch_size=16, sequence_parallel=True),
                ParallelConfig(tp=8, dp=2, ep=32, global_batch_size=16, sequence_parallel=True),
                ParallelConfig(tp=8, dp=6, ep=3, global_batch_size=18, sequence_parallel=True)):
        with pytest.raises(PrismError) as err:
            validate_layout(moe, bad)
        assert err.value.field == "parallel.ep"


def test_resolve_layout_fills_dp_without_touching_its_input():
    par = ParallelConfig(tp=8, pp=4)
    out = resolve_layout(par, 512)
    assert (out.dp, par.dp) == (16, 1)
    assert out.global_batch_size == 16 * 4 * 4
    with pytest.raises(PrismError) as err:
        resolve_layout(par, 100)
    assert err.value.field == "gpus"


def test_mesh_sizes_strides_and_topology():
    mesh = Mesh.of(ParallelConfig(tp=4, cp=2, dp=8, pp=4, ep=4, etp=4), gpus_per_node=8)
    assert (mesh.world_size, mesh.gpus_per_stage, mesh.grad_group, mesh.expert_dp) == (256, 64, 16, 4)
    # the experts' mesh numbers etp innermost, then ep (etp apart), then expert_dp (ep·etp apart)
    assert [mesh.stride(a) for a in ("tp", "cp", "dp", "ep", "expert_dp", "pp")] == [1, 4, 8, 4, 16, 64]
    assert mesh.topology("tp") == (4, 1)  # inside one node
    assert mesh.topology("cp") == (2, 1)  # tp·cp = 8 ranks: one node
    assert mesh.topology("dp") == (1, 8)  # one rank per node, 8 nodes
    assert mesh.topology("pp") == (1, 2)  # neighbouring stages on two nodes
    assert mesh.stage_nodes(1) == list(range(8, 16))
    assert mesh.gpus_per_stage_on([0, 8]) == (8, 8, 0, 0)


def test_layout_sizes_are_positive_integers():
    with pytest.raises(PrismError, match=r"parallel.dp=2.0: must be a positive integer") as err:
        validate_layout(LLAMA, ParallelConfig(tp=8, dp=2.0, global_batch_size=16))
    assert err.value.field == "parallel.dp"
    with pytest.raises(PrismError, match="seq=0: must be a positive integer"):
        validate_layout(LLAMA, ParallelConfig(tp=8, global_batch_size=8), seq=0)

"""The operator registry: every op defines its cost (predictor.core.ops)."""
import numpy as np
import pytest

from predictor.core.ops import OPS, SHAPE_COLUMNS, bytes_moved, flops

SHAPE = {c: 64.0 for c in SHAPE_COLUMNS} | {"causal": True, "optimizer": "adamw"}


@pytest.mark.parametrize("op", list(OPS))
def test_every_op_has_a_finite_cost(op):
    spec = OPS[op]
    assert set(spec.shape) <= set(SHAPE_COLUMNS)
    for pass_ in spec.passes:
        f, b = flops(op, pass_, SHAPE), bytes_moved(op, pass_, SHAPE, "bfloat16")
        if spec.host:  # host time: no device work
            assert f == 0 and b == 0
        else:
            assert np.isfinite(f) and f >= 0 and np.isfinite(b) and b > 0


def test_element_wise_costs_scale_with_their_elements():
    """rope counts tokens·heads·head_dim elements: doubling heads doubles its cost."""
    wide = SHAPE | {"heads": 128.0}
    assert flops("rope", "fwd", wide) == 2 * flops("rope", "fwd", SHAPE)
    assert bytes_moved("swiglu", "bwd", SHAPE, "bfloat16") == 2 * 3 * 64 * 64 * 2

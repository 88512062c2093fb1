"""The row order that makes global mini-batches independent of the world size."""

import pytest
import torch

from verl_lite.trainer.batching import dp_minibatch_order


@pytest.mark.parametrize("world", [1, 2, 4])
def test_each_ranks_local_minibatch_j_is_a_slice_of_global_minibatch_j(world):
    rows, mini = 24, 8
    order = dp_minibatch_order(rows, mini, world)
    assert sorted(order.tolist()) == list(range(rows))
    chunks = order.view(world, -1)  # what DP dispatch hands each rank
    m = mini // world
    for j in range(rows // mini):
        global_j = torch.cat([chunks[r, j * m : (j + 1) * m] for r in range(world)])
        assert global_j.tolist() == list(range(j * mini, (j + 1) * mini))


def test_impossible_layout_is_refused():
    with pytest.raises(ValueError):
        dp_minibatch_order(10, 4, 2)

"""The row order that makes global mini-batches independent of the world size."""

import pytest
import torch

from verl_lite.trainer.batching import balanced_partition, dp_minibatch_order, rank_token_loads


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


def test_balanced_partition_has_equal_sizes_and_balanced_sums():
    parts = balanced_partition([10, 1, 9, 2, 8, 3, 7, 4, 5], 3)
    assert sorted(i for p in parts for i in p) == list(range(9)) and all(len(p) == 3 for p in parts)
    skewed = [9, 9, 9, 9, 1, 1, 1, 1]
    sums = [sum(skewed[i] for i in p) for p in balanced_partition(skewed, 2)]
    assert sums == [20, 20]  # chunking in order would give 36 / 4


@pytest.mark.parametrize("world", [1, 2, 4])
def test_balanced_order_keeps_every_global_minibatch_and_balances_ranks(world):
    g = torch.Generator().manual_seed(0)
    rows, mini = 32, 16
    seqlens = torch.randint(1, 50, (rows,), generator=g)
    seqlens[: rows // 2] += 100  # the first half is long: plain chunking is badly unbalanced
    order = dp_minibatch_order(rows, mini, world, seqlens.tolist())
    assert sorted(order.tolist()) == list(range(rows))
    chunks = order.view(world, -1)
    m = mini // world
    for j in range(rows // mini):
        global_j = torch.cat([chunks[r, j * m : (j + 1) * m] for r in range(world)])
        assert sorted(global_j.tolist()) == list(range(j * mini, (j + 1) * mini))  # same members
    balanced = rank_token_loads(seqlens, order, world)
    plain = rank_token_loads(seqlens, torch.arange(rows), world)
    assert max(balanced) - min(balanced) <= max(plain) - min(plain)
    if world > 1:
        assert max(balanced) - min(balanced) < 60 < max(plain) - min(plain)

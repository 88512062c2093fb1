"""Micro-batch plans: the token budget is never exceeded, and each micro-batch keeps only its columns.

Pure host planning against hand-worked cases and random batches, then the engine on one gloo rank:
with a token budget, what the model actually runs on (the embedding's input) stays within it,
padded and packed, and the log-probs equal those of one whole-batch forward.
"""

from __future__ import annotations

import random

import pytest
import torch

from tests.helpers.configs import fp32_fsdp, tiny_model
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.engine.mesh import build_layout
from verl_lite.engine.micro_batch import (
    MicroPlan,
    RowExtents,
    balanced_groups,
    first_fit_groups,
    plan_micro_batches,
)
from verl_lite.workers.actor import compute_log_prob


def _mask(prompt_lens: list[int], response_lens: list[int], prompt: int, response: int) -> torch.Tensor:
    """verl's layout: prompts left-padded to `prompt`, responses right-padded to `response`."""
    rows = []
    for p, r in zip(prompt_lens, response_lens):
        rows.append([0] * (prompt - p) + [1] * p + [1] * r + [0] * (response - r))
    return torch.tensor(rows)


def _cost(ext: RowExtents, plan: MicroPlan, packed: bool) -> int:
    """What the model runs on for a planned micro-batch: its real tokens packed, else the tensor of
    its rows by the columns it keeps (from the plan's geometry, not the planner's running sums)."""
    if packed:
        return int(ext.tokens[plan.rows].sum())
    return len(plan.rows) * (ext.prompt_width - plan.start + plan.width)


def _packed_extents(tokens: list[int]) -> RowExtents:
    """Rows with `tokens` real tokens each (one prompt token, the rest response)."""
    width = max(tokens)
    return RowExtents.of(_mask([1] * len(tokens), [t - 1 for t in tokens], 1, width), width)


def test_the_issue_example_stays_within_the_budget():
    """Lengths [7, 3, 3, 3, 2, 2], budget 10: first fit needs 2 groups; balancing longest-first into
    the lightest group would make [7, 2, 2] = 11. Two groups of exactly 10 exist and are found."""
    ext = _packed_extents([7, 3, 3, 3, 2, 2])
    assert len(first_fit_groups(ext, 10, packed=True)) == 2
    groups = balanced_groups(ext, 2, 10, packed=True)
    loads = sorted(sum([7, 3, 3, 3, 2, 2][i] for i in g) for g in groups)
    assert loads == [10, 10]
    assert sorted(i for g in groups for i in g) == list(range(6))


@pytest.mark.parametrize("packed", [True, False])
def test_random_batches_never_exceed_the_budget_in_any_group_count(packed):
    rng = random.Random(0)
    for trial in range(300):
        prompt, response = rng.randint(1, 12), rng.randint(1, 12)
        num_rows = rng.randint(1, 14)
        p_lens = [rng.randint(1, prompt) for _ in range(num_rows)]
        r_lens = [rng.randint(0, response) for _ in range(num_rows)]
        ext = RowExtents.of(_mask(p_lens, r_lens, prompt, response), response)
        single = max((ext.tokens if packed else ext.left + ext.right).tolist())
        budget = single + rng.randint(0, 3 * single)
        need = len(first_fit_groups(ext, budget, packed))
        for num_groups in range(need, num_rows + 1):  # every count another rank might impose
            groups = balanced_groups(ext, num_groups, budget, packed)
            assert len(groups) == num_groups and all(groups), (trial, num_groups)
            assert sorted(i for g in groups for i in g) == list(range(num_rows))
            mask = _mask(p_lens, r_lens, prompt, response)
            plans = plan_micro_batches(
                mask,
                response,
                micro_size=None,
                max_token_len=budget,
                packed=packed,
                agree_max=lambda n, k=num_groups: k,
            )
            for plan in plans:
                assert _cost(ext, plan, packed) <= budget, (trial, num_groups, plan)


def test_a_sequence_over_the_budget_is_refused_with_the_keys_to_raise():
    ext = _packed_extents([12, 3])
    with pytest.raises(ValueError, match="ppo_max_token_len_per_gpu"):
        first_fit_groups(ext, 10, packed=True)


def test_a_plan_keeps_the_columns_from_the_longest_prompt_to_the_longest_response():
    # P = 5, R = 4; rows: prompt 2 + response 1, prompt 3 + response 2, prompt 1 + response 0
    mask = _mask([2, 3, 1], [1, 2, 0], prompt=5, response=4)
    plans = plan_micro_batches(mask, 4, micro_size=2, max_token_len=None, packed=False)
    assert [p.rows.tolist() for p in plans] == [[0, 1], [2]]
    assert (plans[0].start, plans[0].width) == (2, 2)  # columns 2..6: the 3-token prompt, 2 responses
    assert (plans[1].start, plans[1].width) == (4, 1)  # one prompt column, one (empty) response column
    dropped = mask[:2, :2].sum() + mask[:2, 7:].sum() + mask[2, :4].sum() + mask[2, 6:].sum()
    assert dropped == 0, "only padding is dropped"


def _budgeted_forwards(rank, world, model_dir, batch, budget):
    out = {}
    for packed in (False, True):
        engine = FSDPEngine(
            tiny_model(model_dir, use_remove_padding=packed),
            fp32_fsdp(),
            build_layout("cpu"),
            role="ref",
        )
        seen = []
        embed = engine.module.get_input_embeddings()
        embed.register_forward_hook(lambda m, args, o, seen=seen: seen.append(tuple(args[0].shape)))
        logp = compute_log_prob(
            engine, batch, micro_size=None, max_token_len=budget, temperature=1.0, phase="lp"
        )
        whole = compute_log_prob(
            engine, batch, micro_size=len(batch["responses"]), max_token_len=None, temperature=1.0, phase="lp"
        )
        out[packed] = (seen, logp, whole)
    return out


def test_the_model_runs_on_at_most_the_budget_and_gives_the_whole_batch_log_probs(tiny_model_dir):
    batch = make_ppo_batch(vocab=110, bs=12, prompt_len=8, response_len=8, seed=5)
    budget = 24  # rows of up to 16 tokens: groups of one to a few rows
    out = run_ranks(_budgeted_forwards, 1, tiny_model_dir, batch, budget)[0]
    mask = batch["response_mask"].bool()
    real = batch["attention_mask"].sum(-1)
    for packed, (seen, logp, whole) in out.items():
        budgeted = seen[: len(seen) - 1]  # the last forward is the whole batch
        assert len(budgeted) >= 3
        if packed:  # packed rows hold real tokens only, each micro-batch's tokens within the budget
            assert sum(rows * width for rows, width in budgeted) >= int(real.sum())
        else:
            assert all(rows * width <= budget for rows, width in budgeted), budgeted
        torch.testing.assert_close(logp[mask], whole[mask], atol=1e-5, rtol=0)
    total = sum(rows * width for rows, width in out[False][0][:-1])
    assert total < 12 * 16, "cutting micro-batches to their columns runs on fewer positions than the batch"

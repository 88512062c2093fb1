"""use_remove_padding: packed forwards give the padded path's log-probs and updates, on padding-free input.

Unit checks of pack/unpack on a hand-made batch, then the actor on 2 gloo ranks (FSDP2, fp32, the
tiny model): log-probs packed vs padded within 1e-5, 2 training steps with equal params, and the
model's embedding sees exactly the real tokens when packed.
"""

from __future__ import annotations

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh

from tests.helpers.configs import fp32_fsdp, tiny_actor, tiny_model
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.config.schema import OptimConfig
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.engine.packing import pack, plan_pack, unpack
from verl_lite.trainer.batching import dp_minibatch_order
from verl_lite.workers.actor import PPOActor, compute_log_prob

ROWS, MINI, RESP, TOL = 8, 4, 5, 1e-5


def test_pack_keeps_real_tokens_and_restarts_positions():
    input_ids = torch.tensor([[0, 7, 8, 9, 0], [5, 6, 1, 0, 0]])
    mask = torch.tensor([[0, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    plan = plan_pack(mask, position_ids)  # 3 + 3 tokens do not fit one row of 5
    assert pack(input_ids, plan).tolist() == [[7, 8, 9], [5, 6, 1]]
    assert plan.position_ids.tolist() == [[0, 1, 2], [0, 1, 2]]
    values = torch.arange(6.0).view(2, 3, 1)
    assert unpack(values, plan)[..., 0].tolist() == [[0, 0, 1, 2, 0], [3, 4, 5, 0, 0]]


def test_short_sequences_share_rows_and_slack_is_a_block_of_its_own():
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 1]])
    input_ids = torch.arange(1, 25).view(4, 6) * mask
    plan = plan_pack(mask, (mask.cumsum(-1) - 1).clamp(min=0))
    # lengths 4, 2, 3, 1 into rows of <= 6: [4, 2] and [3, 1] (first fit, longest first)
    packed = pack(input_ids, plan)
    assert packed.tolist() == [[3, 4, 5, 6, 11, 12], [16, 17, 18, 24, 0, 0]]
    assert plan.position_ids.tolist() == [[0, 1, 2, 3, 0, 1], [0, 1, 2, 0, 0, 1]]
    back = unpack(packed.unsqueeze(-1), plan)[..., 0]
    assert torch.equal(back, input_ids)


def test_pack_rejects_positions_that_do_not_restart():
    mask = torch.ones(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="use_remove_padding"):
        plan_pack(mask, torch.tensor([[0, 2, 3]]))


def _actor(world, model_dir, packed):
    cfg = tiny_actor(grad_clip=0.5, ppo_micro_batch_size_per_gpu=2)
    cfg.clip_ratio_low = cfg.clip_ratio_high = 0.2
    cfg.optim = OptimConfig(
        lr=1e-3, total_training_steps=2
    )  # Adam magnifies kernel-order noise on tiny grads
    engine = FSDPEngine(
        tiny_model(model_dir, use_remove_padding=packed),
        fp32_fsdp(),
        init_device_mesh("cpu", (world,)),
        role="actor",
        optim_cfg=cfg.optim,
        grad_clip=cfg.grad_clip,
    )
    return engine, PPOActor(engine, cfg, response_length=RESP, temperature=1.0)


def _run(rank, world, model_dir):
    out = {}
    for packed in (False, True):
        engine, actor = _actor(world, model_dir, packed)
        seen = []
        embed = engine.module.get_input_embeddings()
        hook = embed.register_forward_hook(lambda m, args, o, seen=seen: seen.append(args[0].numel()))
        rows = dp_minibatch_order(ROWS, MINI, world).view(world, -1)[rank]
        logps, history = [], []
        for step in range(2):
            batch = make_ppo_batch(vocab=110, bs=ROWS, prompt_len=6, response_len=RESP, seed=30 + step)
            local = {k: v[rows] for k, v in batch.items()}
            logp = compute_log_prob(
                engine, local, micro_size=2, max_token_len=None, temperature=1.0, phase="log_prob"
            )
            logps.append(logp * local["response_mask"])  # padding positions carry no log-prob
            history.append(actor.update(local, mini_size=MINI // world, micro_size=2))
            if step == 0:
                hook.remove()
                first_mask = local["attention_mask"]
        params = {n: t.clone() for n, t in engine.iter_full_params()}
        out[packed] = (logps, history, params, sum(seen), first_mask)
    return out


@pytest.fixture(scope="module")
def runs(tiny_model_dir):
    return run_ranks(_run, 2, tiny_model_dir)


def test_packed_log_probs_equal_padded(runs):
    for rank_out in runs:
        for padded, packed in zip(rank_out[False][0], rank_out[True][0]):
            torch.testing.assert_close(packed, padded, atol=TOL, rtol=0)


def test_packed_update_equals_padded(runs):
    padded, packed = runs[0][False], runs[0][True]
    for a, b in zip(padded[1], packed[1]):
        for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy"):
            assert abs(a[key] - b[key]) < TOL, f"{key}: {a[key]} vs {b[key]}"
    worst = max((padded[2][n] - packed[2][n]).abs().max().item() for n in padded[2])
    assert worst < TOL, f"params differ by {worst}"


def test_padded_micro_batches_keep_only_their_columns_and_packed_ones_only_real_tokens(runs):
    """Embedding inputs over step 1 (log-prob forward + update forward, micro-batches of rows [0, 1]
    and [2, 3] each): padded, each micro-batch runs on the columns from its first real token to its
    last (all of the batch's other columns are padding in both rows); packed, on the real tokens
    plus at most the slack of the last packed row of each micro-batch."""
    for rank_out in runs:
        mask = rank_out[False][4]
        kept = 0
        for pair in (mask[0:2], mask[2:4]):
            cols = torch.nonzero(pair.any(0)).squeeze(1)
            kept += 2 * int(cols.max() - cols.min() + 1)
        assert rank_out[False][3] == 2 * kept  # one log-prob pass + one update pass
        assert kept < mask.numel(), "the batch must have columns to drop for the check to mean anything"
        real = int(mask.sum())
        # two sequences that do not fit one row of the micro-batch's width take two rows: then
        # packing runs on as many positions as the trimmed padded micro-batch, never more
        assert 2 * real <= rank_out[True][3] <= rank_out[False][3]

"""The memory model's terms against hand calculations for Qwen2.5-7B.

Shapes are Qwen2.5's public config.json values (tests/helpers/model_configs.py, whose 7B layout
tests/engine/test_model_shape.py checks against transformers). Every expected number below is
written out from the definitions in the docstrings of planner/engine_memory.py, activations.py
and host.py (and the FSDP2 / AdamW code they cite), not by calling their helpers.
"""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from tests.helpers.model_configs import HALF_B, INTER, KV, LAYER, ROOT, SEVEN_B, H, L, N, V
from verl_lite.algos import chunked_logprob
from verl_lite.engine.model_shape import ModelShape, read_shape
from verl_lite.planner.activations import fused_chunk_tokens
from verl_lite.planner.engine_memory import estimate
from verl_lite.planner.engine_setup import EngineSetup, parts
from verl_lite.planner.host import pow2_ceil

GIB = 2**30


@pytest.fixture(scope="module")
def seven_b() -> ModelShape:
    return read_shape(SEVEN_B)


def setup(**changes) -> EngineSetup:
    """8 ranks, no offload, fp32 master / bf16 compute / fp32 reduce, micro 2 x (512 + 512) tokens."""
    base = dict(
        world=8,
        mode="none",
        micro=2,
        seq_len=1024,
        response_len=512,
        model_dtype="fp32",
        param_dtype="bf16",
        reduce_dtype="fp32",
        grad_checkpointing=True,
    )
    return EngineSetup(**{**base, **changes})


def test_state_terms_and_the_foreach_adamw_step_on_8_ranks(seven_b):
    t = estimate(seven_b, setup()).terms
    shard = N // 8  # every dim 0 divides by 8: no padding
    assert t["params"] == t["grads"] == shard * 4 == 3_807_808_256
    assert t["optimizer"] == 2 * shard * 4  # exp_avg, exp_avg_sq
    assert t["step_temp"] == shard * 4  # foreach sqrt(exp_avg_sq)
    assert t["grad_accum"] == 0, "reduce-scatter every micro-batch: nothing accumulates unsharded"
    e = estimate(seven_b, setup())
    step_peak = 5 * shard * 4  # params + grads + two moments + the temporary, fp32
    assert e.update >= step_peak and e.resident == 3 * shard * 4


def test_gathered_unit_grads_and_reduce_buffers(seven_b):
    t = estimate(seven_b, setup()).terms
    # root + the computing and the prefetched layer in bf16, plus the root's shard cast for all-gather
    assert t["gathered"] == (ROOT + 2 * LAYER) * 2 + (ROOT // 8) * 2 == 3_384_727_424
    assert t["root_grads"] == ROOT * 2
    # fp32 reduce-scatter input beside first the layer's bf16 grads, then the fp32 output shard
    assert t["reduce_layer"] == LAYER * 4 + max(LAYER * 2, LAYER // 8 * 4) == LAYER * 6
    assert t["reduce_root"] == ROOT * 6


def test_activations_and_the_update_peak(seven_b):
    e = estimate(seven_b, setup())
    tokens, response_tokens = 2 * 1024, 2 * 512
    per_layer = tokens * ((8 * H + 4 * KV + 4 * INTER) * 2 + 2 * H * 4)
    layers = L * tokens * H * 2 + per_layer  # checkpointed inputs + one recomputed layer
    logits = tokens * V * 2 + 4 * response_tokens * V * 4
    # sdpa's mask of 2 rows of 1024: the boolean one (shared), the recomputed layer's bf16 copy
    mask = 2 * 1024 * 1024 + 2 * 1024 * 1024 * 2
    acts = layers + logits + tokens * H * 2 + mask
    assert e.terms["activations"] == acts == 4_041_211_904
    held = 4 * (N // 8) * 4
    in_layers = acts + ROOT * 2 + LAYER * 6
    at_root = ROOT * 6
    assert e.update == held + 3_384_727_424 + max(in_layers, at_root) == 26_235_515_776  # 24.4 GiB


def test_deferred_reduce_accumulates_every_unsharded_grad_in_fp32(seven_b):
    for mode in ("none", "param_optimizer_offload", "offload_policy"):
        t = estimate(seven_b, setup(mode=mode, reduce_every_micro=False)).terms
        assert t["grad_accum"] == N * 4, mode  # reduce_dtype fp32 even with bf16 compute


def test_offload_policy_on_one_gpu_copies_the_root_shard_in_before_casting(seven_b):
    e = estimate(seven_b, setup(world=1, mode="offload_policy"))
    t = e.terms
    assert (t["params"], t["grads"], t["optimizer"], t["step_temp"], e.resident) == (0, 0, 0, 0, 0)
    # gathered bf16 + the all-gather input (the root's bf16 cast) + one tensor's fp32 copy from the
    # host before its cast (the largest: the embedding or the LM head)
    assert t["gathered"] == (ROOT + 2 * LAYER) * 2 + ROOT * 2 + V * H * 4
    assert t["reduce_root"] == 2 * ROOT * 4, "one rank: the reduce-scatter output is the whole root"


def test_manual_offload_streams_one_unit_of_moments(seven_b):
    e = estimate(seven_b, setup(world=1, mode="param_optimizer_offload"))
    # moments of three units at once (the root stepping between the last two layers, one arriving
    # and one leaving); the step's temporary: the largest unit's, the root's
    assert e.terms["optimizer"] == 2 * (ROOT + 2 * LAYER) * 4 and e.terms["step_temp"] == ROOT * 4
    assert e.terms["params"] == N * 4 and e.resident == 0


def test_pow2_ceil_is_the_caching_host_allocators_block():
    assert (pow2_ceil(1), pow2_ceil(3), pow2_ceil(4), pow2_ceil(5), pow2_ceil(2**26 + 1)) == (
        1,
        4,
        4,
        8,
        2**27,
    )


def test_manual_offload_host_bytes_are_exact_slots_pinned_or_not(seven_b):
    """Manual offload's host homes are HostBuffers: exactly the shards' bytes, each slot rounded up to
    64 bytes (none of Qwen2.5-7B's shards needs rounding), pinned or not. Issue 12's ~162 GiB with the
    caching host allocator's power-of-two blocks becomes 85 GiB."""
    for pinned_host in (True, False):
        e = estimate(seven_b, setup(world=1, mode="param_optimizer_offload", pinned_host=pinned_host))
        assert e.terms["host_params"] == N * 4 and e.terms["host_optimizer"] == 2 * N * 4
        assert e.host == 3 * N * 4 and round(e.host / GIB) == 85
    odd = ModelShape(hidden=8, layers=1, vocab=10, intermediate=12, heads=2, kv_heads=1)
    e = estimate(odd, setup(world=3, mode="param_optimizer_offload", model_dtype="fp32"))
    # world 3: each tensor's shard is ceil(dim0 / 3) rows; every slot is then rounded up to 64 bytes
    shards = [-(-d0 // 3) * (n // d0) * 4 for d0, n in odd.all_tensors()]
    assert e.terms["host_params"] == sum(-(-b // 64) * 64 for b in shards) > sum(shards)


def test_offload_policy_host_holds_pinned_params_and_grads_and_pageable_moments(seven_b):
    e = estimate(seven_b, setup(world=8, mode="offload_policy", pinned_host=True))
    t = e.terms
    exact = N // 8 * 4
    assert t["host_params"] == t["host_grads"] > exact  # FSDP2 pins each shard; grads land pinned
    assert t["host_optimizer"] == 2 * exact + (V // 8) * H * 4  # moments + the largest tensor's temp
    assert e.host_load == N * 4, "each rank loads the whole model before sharding"


def test_frozen_engine_and_no_grad_forward(seven_b):
    ref = estimate(seven_b, setup(micro=0, trains=False, forward_micro=4))
    # params only, kept in the bf16 compute dtype: a frozen engine needs no fp32 master weights
    assert ref.update == 0 and ref.resident == N // 8 * 2
    tokens, response_tokens = 4 * 1024, 4 * 512
    mask = 4 * 1024 * 1024 * (1 + 2)  # 4 rows: the boolean mask and one layer's bf16 copy
    fwd = tokens * (3 * INTER + 4 * H) * 2 + tokens * V * 2 + 3 * response_tokens * V * 4 + mask
    assert ref.terms["forward_activations"] == fwd
    gathered = (ROOT + 2 * LAYER) * 2  # no all-gather input cast: the shards are bf16 already
    assert ref.forward == N // 8 * 2 + gathered + fwd
    offloaded = estimate(
        seven_b, setup(micro=0, trains=False, forward_micro=4, mode="param_optimizer_offload")
    )
    assert offloaded.resident == 0 and offloaded.forward == ref.forward, (
        "param_offload: in only for the phase"
    )


# --- the memory levers (issue 13) ---------------------------------------------------------------------
def layer_bytes(tokens: int) -> int:
    """One decoder layer's saved tensors without checkpointing, bf16 (+ two fp32 norm inputs)."""
    return tokens * ((8 * H + 4 * KV + 4 * INTER) * 2 + 2 * H * 4)


def test_sequence_parallel_holds_half_of_every_per_token_term_but_the_whole_rows_mask(seven_b):
    one, two = estimate(seven_b, setup()), estimate(seven_b, setup(sp_size=2))
    tokens, response_tokens = 1024, 512  # each of the 2 ranks: half of 2 x (512 + 512)
    layers = L * tokens * H * 2 + layer_bytes(tokens)
    logits = tokens * V * 2 + 4 * response_tokens * V * 4
    mask = 2 * 1024 * 1024 * 2  # one additive bf16 mask of the 2 whole rows, shared by the layers
    assert two.terms["activations"] == layers + logits + tokens * H * 2 + mask
    assert 0.49 < two.terms["activations"] / one.terms["activations"] < 0.51
    assert two.terms["params"] == one.terms["params"], "FSDP still shards over every rank"


def test_sequence_parallel_token_budget_is_per_rank(seven_b):
    """Dynamic batching: the group's budget is sp x the per-GPU one (verl), so a rank holds the
    per-GPU budget whatever sp is; only the mask grows (rows of the group's micro-batch)."""
    one = estimate(seven_b, setup(tokens_per_micro=4096))
    two = estimate(seven_b, setup(tokens_per_micro=4096, sp_size=2))
    rows_one, rows_two = 4, 8  # ceil(budget x sp / 1024)
    mask_one = rows_one * 1024 * 1024 * (1 + 2)
    mask_two = rows_two * 1024 * 1024 * 2
    assert two.terms["activations"] - one.terms["activations"] == mask_two - mask_one


def test_fused_log_probs_keep_two_chunks_and_the_heads_fp32_grad(seven_b):
    assert fused_chunk_tokens(V) == 441 == chunked_logprob.fused_chunk_tokens(V)  # 256 MiB / (4 V)
    fused = estimate(seven_b, setup(fused=True))
    tokens = 2048
    layers = L * tokens * H * 2 + layer_bytes(tokens)
    mask = 2 * 1024 * 1024 * (1 + 2)
    head = 2 * 441 * V * 4 + V * H * 4  # logits chunk and its softmax; the fp32 grad of the bf16 head
    assert fused.terms["activations"] == layers + mask + head + tokens * H * 2
    plain = estimate(seven_b, setup())
    saved = plain.terms["activations"] - fused.terms["activations"]
    # 3.1 GB of logits and their fp32 copies against 0.5 GB of chunks and 2.2 GB of fp32 head grad
    assert saved == tokens * V * 2 + 4 * 1024 * V * 4 - head == 397_799_424
    fp32 = estimate(seven_b, setup(fused=True, param_dtype="fp32")).terms["activations"]
    fp32_plain = estimate(seven_b, setup(param_dtype="fp32")).terms["activations"]
    assert fp32_plain - fp32 == tokens * V * 4 + 4 * 1024 * V * 4 - 2 * 441 * V * 4, "fp32: no widened grad"
    forward = estimate(seven_b, setup(micro=0, trains=False, forward_micro=4, fused=True))
    fwd_mask = 4 * 1024 * 1024 * (1 + 2)
    expect = 4096 * (3 * INTER + 4 * H) * 2 + fwd_mask + 2 * 441 * V * 4
    assert forward.terms["forward_activations"] == expect


def test_entropy_chunking_keeps_one_copy_and_checkpointing_alone_keeps_the_peak(seven_b):
    plain = estimate(seven_b, setup(micro=8))
    chunked = estimate(seven_b, setup(micro=8, entropy_chunking=True))
    response_tokens = 8 * 512
    copy, chunk = response_tokens * V * 4, 2048 * V * 4
    assert plain.terms["activations"] - chunked.terms["activations"] == 2 * copy - chunk
    ckpt = estimate(seven_b, setup(micro=8, entropy_checkpointing=True))
    assert ckpt.terms["activations"] == plain.terms["activations"]


def test_activation_offload_keeps_two_layers_on_the_device_and_the_rest_pinned_on_the_host(seven_b):
    tokens = 2048
    mask_bool, mask_layer = 2 * 1024 * 1024, 2 * 1024 * 1024 * 2
    head = tokens * V * 2 + 4 * 1024 * V * 4 + tokens * H * 2
    ckpt = estimate(seven_b, setup(activation_offload=True, pinned_host=True))
    inputs = tokens * H * 2  # 14.7 MB: pinned as 16 MiB
    assert ckpt.terms["activations"] == 2 * inputs + layer_bytes(tokens) + mask_layer + mask_bool + head
    assert ckpt.terms["host_activations"] == (L - 1) * 2**24
    no_ckpt = estimate(seven_b, setup(activation_offload=True, grad_checkpointing=False))
    saved = layer_bytes(tokens) + mask_layer
    assert no_ckpt.terms["activations"] == 2 * saved + mask_bool + head
    assert no_ckpt.terms["host_activations"] == (L - 1) * saved, "pageable: exact bytes"
    plain = estimate(seven_b, setup(grad_checkpointing=False))
    assert plain.terms["activations"] - no_ckpt.terms["activations"] == (L - 2) * saved
    assert no_ckpt.host == plain.host + (L - 1) * saved


# LoRA rank 8 on all seven linears of a 7B layer: r x (in + out) each
A8 = 8 * ((H + H) + (H + KV) + (H + KV) + (H + H) + 3 * (H + INTER))
NT = L * A8  # trainable parameters


def lora(**changes) -> EngineSetup:
    return setup(lora_rank=8, **changes)


def test_lora_counts_match_peft_on_the_real_model():
    """Trainable and frozen counts against PEFT's own on meta-device models (0.5B: actor; value head)."""
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import AutoModelForTokenClassification

    path = HALF_B
    cfg = AutoConfig.from_pretrained(path)
    for kind, head, builder, task, extra in [
        ("actor", "lm", AutoModelForCausalLM, TaskType.CAUSAL_LM, {}),
        (
            "critic",
            "value",
            AutoModelForTokenClassification,
            TaskType.TOKEN_CLS,
            {"exclude_modules": ["score"]},
        ),
    ]:
        with torch.device("meta"):
            if head == "value":
                cfg.num_labels = 1  # the critic's scalar head
            model = builder.from_config(cfg)
            peft = get_peft_model(
                model, LoraConfig(task_type=task, r=8, target_modules="all-linear", **extra)
            )
        trained = sum(p.numel() for p in peft.parameters() if p.requires_grad)
        frozen = sum(p.numel() for p in peft.parameters() if not p.requires_grad)
        shape = read_shape(path, head=head)
        pt = parts(shape, EngineSetup(world=1, mode="none", micro=1, seq_len=8, response_len=4, lora_rank=8))
        assert trained == shape.layers * pt.full("layer_trained") + pt.full("root_trained"), kind
        assert frozen == shape.num_params, kind


def test_lora_state_is_the_adapters_and_the_frozen_base_is_params_only(seven_b):
    assert (A8, NT) == (720_896, 20_185_088)  # PEFT prints 20,185,088 trainable params for 7B r=8
    e = estimate(seven_b, lora())
    t = e.terms
    assert t["params"] == (N + NT) // 8 * 4, "every dim 0 divides by 8 (lora_A's rank 8 too)"
    assert t["grads"] == NT // 8 * 4 and t["optimizer"] == 2 * NT // 8 * 4 and t["step_temp"] == NT // 8 * 4
    assert e.resident == (N + NT) // 8 * 4 + 2 * NT // 8 * 4
    assert t["root_grads"] == t["reduce_root"] == 0, "embeddings, head and final norm are frozen"
    assert t["reduce_layer"] == A8 * 4 + max(A8 * 2, A8 // 8 * 4)  # only the adapters reduce
    assert t["gathered"] == (ROOT + 2 * (LAYER + A8)) * 2 + ROOT // 8 * 2
    full = estimate(seven_b, setup())
    assert full.update - e.update > 3 * (N // 8) * 4 * 0.99, "grads and both moments of the base are gone"
    assert estimate(seven_b, lora(reduce_every_micro=False)).terms["grad_accum"] == NT * 4


def test_lora_activations_add_each_adapters_rank_wide_intermediate(seven_b):
    tokens = 2 * 1024
    extra = estimate(seven_b, lora()).terms["activations"] - estimate(seven_b, setup()).terms["activations"]
    assert extra == tokens * 8 * 7 * 2, "checkpointed: one recomputed layer's seven rank-8 outputs in bf16"


def test_lora_offload_moves_only_the_adapters_grads_and_moments(seven_b):
    e = estimate(seven_b, lora(world=1, mode="offload_policy"))
    t = e.terms
    assert t["host_params"] == (N + NT) * 4 and t["host_grads"] == NT * 4
    assert t["host_optimizer"] == 2 * NT * 4 + INTER * 8 * 4  # + the largest adapter's step temporary
    manual = estimate(seven_b, lora(world=1, mode="param_optimizer_offload"))
    # three layers' adapter moments in flight (the root trains nothing: no unit of its own)
    assert manual.terms["optimizer"] == 2 * 3 * A8 * 4 and manual.terms["step_temp"] == A8 * 4
    assert manual.terms["host_optimizer"] == 2 * NT * 4

"""The memory model against a hand calculation, and its parameter counts against transformers.

Shapes are Qwen2.5's public config.json values (scripts/model_configs/). The hand calculation
below is written out term by term from the definitions in engine/memory_model.py's docstring,
not by calling its helpers.
"""

import os

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from verl_lite.engine.memory_model import ModelShape, Setup, estimate, read_shape

CONFIGS = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "scripts", "model_configs")
PUBLIC_PARAM_COUNTS = {
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-1.5b": 1_543_714_304,
    "qwen2.5-7b": 7_615_616_512,
}


@pytest.mark.parametrize("name", sorted(PUBLIC_PARAM_COUNTS))
def test_param_count_matches_the_real_model(name):
    path = os.path.join(CONFIGS, name)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    real = sum(p.numel() for p in model.parameters())
    assert read_shape(path).num_params == real == PUBLIC_PARAM_COUNTS[name]


def test_half_billion_on_two_ranks_matches_the_hand_calculation():
    shape = read_shape(os.path.join(CONFIGS, "qwen2.5-0.5b"))
    setup = Setup(world=2, mode="none", micro=2, seq_len=64, response_len=16, rollout_sequences=16)
    e = estimate(shape, setup)
    # one decoder layer: q (896x896 + bias 896), k and v (896x128 + bias 128 each), o (896x896),
    # gate/up/down (3 x 896x4864), two RMSNorms (2 x 896)
    layer = (896 * 896 + 896) + 2 * (896 * 128 + 128) + 896 * 896 + 3 * 896 * 4864 + 2 * 896
    assert layer == 14_912_384
    root = 151_936 * 896 + 896  # tied embeddings: one vocab x hidden matrix, plus the final norm
    n = 24 * layer + root
    shard = n // 2
    assert e.params == 4 * shard  # fp32 master shard
    assert e.grads == 4 * shard
    assert e.optimizer == 2 * 4 * shard  # AdamW exp_avg + exp_avg_sq
    # root and two layers gathered, plus one layer's unsharded grad, fp32
    assert e.gathered == (root + 2 * layer) * 4 + layer * 4
    tokens = 2 * 64
    per_layer = tokens * ((8 * 896 + 4 * 128 + 4 * 4864) * 4 + 2 * 896 * 4)
    logits = tokens * 151_936 * 4 + 4 * (2 * 16) * 151_936 * 4  # logits + 4 fp32 response copies
    assert e.activations == 24 * per_layer + logits + tokens * 896 * 4
    assert e.rollout == n * 4  # the HF rollout's fp32 copy
    kv_cache = 2 * 24 * 128 * 16 * 64 * 4  # K and V, 24 layers, kv dim 2x64, 16 sequences of 64 tokens
    assert e.between == 4 * shard + 8 * shard + n * 4 + kv_cache  # params + moments + rollout weights + KV
    assert (
        e.update
        == 4 * shard * 4 + (root + 3 * layer) * 4 + 24 * per_layer + logits + tokens * 896 * 4 + n * 4
    )
    # summed by hand: 988,065,536 x 2 (params, grads) + 1,976,131,072 (moments) + 723,490,816 (gathered)
    # + 511,508,480 (activations) + 1,976,131,072 (rollout copy) = 7,163,392,512 bytes, 6.67 GiB
    assert e.update == 7_163_392_512


def test_offload_modes_move_the_right_terms():
    shape = ModelShape(hidden=64, layers=2, vocab=100, intermediate=128, heads=2, kv_heads=1)
    base = dict(world=1, micro=1, seq_len=8, response_len=4, rollout_dtype=None)
    none = estimate(shape, Setup(mode="none", **base))
    manual = estimate(shape, Setup(mode="param_optimizer_offload", **base))
    policy = estimate(shape, Setup(mode="offload_policy", **base))
    n = shape.num_params
    assert (none.params, none.optimizer, none.host) == (4 * n, 8 * n, 0)
    # manual: params back on the device for the update, moments streamed one unit at a time
    assert manual.params == 4 * n and manual.optimizer == 8 * max(shape.layer_params, shape.root_params)
    assert manual.between == 0 and manual.host == 12 * n
    assert (policy.params, policy.grads, policy.optimizer, policy.host) == (0, 0, 0, 16 * n)
    assert none.update > manual.update > policy.update
    last_only = estimate(shape, Setup(mode="offload_policy", reduce_every_micro=False, **base))
    assert last_only.grads == 4 * n, "unsharded grads wait on the device for the last micro-batch"
    ckpt = estimate(shape, Setup(mode="none", grad_checkpointing=True, **base))
    assert ckpt.activations < none.activations


def test_read_shape_names_the_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        read_shape(str(tmp_path))
    (tmp_path / "config.json").write_text('{"hidden_size": 8}')
    with pytest.raises(ValueError, match="num_hidden_layers"):
        read_shape(str(tmp_path))

"""vLLM 0.32's engine-argument rules, checked without vLLM from the rollout config and model config."""

from types import SimpleNamespace

from verl_lite.rollout.vllm_args import check_engine_args, derived_max_len

QWEN_TINY = {
    "hidden_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "max_position_embeddings": 64,
}


def rollout(**over):
    base = dict(
        max_num_batched_tokens=8192,
        max_num_seqs=1024,
        enable_chunked_prefill=True,
        max_model_len=24,
        prompt_length=16,
        response_length=8,
        tensor_model_parallel_size=1,
        cpu_kv_cache_gb=1.0,
        dtype="fp32",
        engine_kwargs=SimpleNamespace(vllm={}),
    )
    return SimpleNamespace(**(base | over))


def test_a_good_config_passes_on_cpu_and_gpu():
    assert check_engine_args(rollout(), QWEN_TINY, "m", on_gpu=False) == []
    assert check_engine_args(rollout(), QWEN_TINY, "m", on_gpu=True) == []


def test_each_rule_names_its_keys():
    [msg] = check_engine_args(rollout(max_num_batched_tokens=512), QWEN_TINY, "m", on_gpu=True)
    assert "max_num_batched_tokens=512 is below actor_rollout_ref.rollout.max_num_seqs=1024" in msg
    [msg] = check_engine_args(rollout(tensor_model_parallel_size=3), QWEN_TINY, "m", on_gpu=True)
    assert "tensor_model_parallel_size=3 does not divide the model's 4 attention heads" in msg
    [msg] = check_engine_args(rollout(max_model_len=100), QWEN_TINY, "m", on_gpu=True)
    assert "max_model_len=100 exceeds the model's 64 positions" in msg
    [msg] = check_engine_args(rollout(cpu_kv_cache_gb=1e-6), QWEN_TINY, "m", on_gpu=False)
    assert "cpu_kv_cache_gb=1e-06 cannot hold one sequence of max_model_len=24 tokens" in msg
    head16 = QWEN_TINY | {"num_attention_heads": 8}
    assert any("head size 16" in p for p in check_engine_args(rollout(), head16, "m", on_gpu=False))
    assert check_engine_args(rollout(), head16, "m", on_gpu=True) == []  # GPU kernels take 16


def test_cpu_kv_cache_blocks():
    """On CPU the engine runs blocks of 32 tokens unless engine_kwargs.vllm.block_size says otherwise;
    vLLM's CPU attention takes multiples of 32 only, and its cache must hold one sequence in whole
    blocks (QWEN_TINY in fp32: 1,024 bytes a token, so 24 tokens take one 32-token block)."""
    blocks = lambda size: rollout(engine_kwargs=SimpleNamespace(vllm={"block_size": size}))  # noqa: E731
    assert check_engine_args(blocks(64), QWEN_TINY, "m", on_gpu=False) == []
    for bad in (16, 48, 0, -32, "32", 32.0, True):
        [msg] = check_engine_args(blocks(bad), QWEN_TINY, "m", on_gpu=False)
        assert msg.startswith(f"actor_rollout_ref.rollout.engine_kwargs.vllm.block_size={bad!r}: ")
        assert "multiple of 32 tokens" in msg
        assert check_engine_args(blocks(bad), QWEN_TINY, "m", on_gpu=True) == []  # the GPU's own rules
    fits_24_not_32 = 28_000 / 1024**3
    [msg] = check_engine_args(rollout(cpu_kv_cache_gb=fits_24_not_32), QWEN_TINY, "m", on_gpu=False)
    assert "cannot hold one sequence of max_model_len=24 tokens in blocks of 32" in msg
    assert check_engine_args(rollout(cpu_kv_cache_gb=32_768 / 1024**3), QWEN_TINY, "m", on_gpu=False) == []
    [msg] = check_engine_args(
        rollout(cpu_kv_cache_gb=32_768 / 1024**3, engine_kwargs=SimpleNamespace(vllm={"block_size": 64})),
        QWEN_TINY,
        "m",
        on_gpu=False,
    )
    assert "in blocks of 64" in msg


def test_linear_rope_scaling_extends_the_positions():
    assert (
        derived_max_len({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2}})
        == 8192
    )
    assert (
        derived_max_len({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "yarn", "factor": 4}})
        == 4096
    )


def test_scheduler_rules_agree_with_vllms_own_checks():
    """The same verdict as vLLM's SchedulerConfig on a grid of token budgets, sequence counts, lengths."""
    import itertools

    import pytest

    scheduler = pytest.importorskip("vllm.config.scheduler")
    for tokens, seqs, model_len, chunked in itertools.product((16, 24, 64), (8, 64), (24,), (True, False)):
        r = rollout(
            max_num_batched_tokens=tokens,
            max_num_seqs=seqs,
            max_model_len=model_len,
            enable_chunked_prefill=chunked,
        )
        ours = [p for p in check_engine_args(r, QWEN_TINY, "m", on_gpu=True) if "max_num_batched_tokens" in p]
        if not chunked and tokens < model_len:  # this rule is rollout/checks.py's (same numbers)
            ours.append("below max_model_len without chunked prefill")
        try:
            scheduler.SchedulerConfig(
                max_model_len=model_len,
                is_encoder_decoder=False,
                max_num_batched_tokens=tokens,
                max_num_seqs=seqs,
                enable_chunked_prefill=chunked,
            )
            vllm_refuses = False
        except ValueError:
            vllm_refuses = True
        assert bool(ours) == vllm_refuses, (tokens, seqs, model_len, chunked, ours)

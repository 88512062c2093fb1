"""The vLLM engine's arguments from verl's keys (pure: no engine is built): rollout.load_format and
rollout.engine_kwargs.vllm reach LLM(...); arguments the hybrid engine sets itself are refused at
start-up naming the key to use instead."""

import pytest

from tests.helpers.configs import tiny_model, tiny_rollout
from verl_lite.config.compose import load_config
from verl_lite.config.errors import ConfigError
from verl_lite.preflight import prepare
from verl_lite.rollout import vllm_available
from verl_lite.rollout.vllm_rollout import engine_kwargs
from verl_lite.utils import device as dev


def test_load_format_and_engine_kwargs_reach_the_engine():
    rollout = tiny_rollout()
    rollout.load_format = "safetensors"
    rollout.engine_kwargs.vllm = {"swap_space": 0, "max_logprobs": 2, "kv_cache_dtype": None}
    kwargs = engine_kwargs(tiny_model("/m"), rollout, enable_sleep_mode=False)
    assert kwargs["load_format"] == "safetensors" and kwargs["model"] == "/m"
    assert kwargs["swap_space"] == 0 and kwargs["max_logprobs"] == 2
    assert "kv_cache_dtype" not in kwargs  # null values are dropped, as verl does
    assert engine_kwargs(tiny_model("/m"), tiny_rollout(), False)["load_format"] == "dummy"  # verl's default


def test_cpu_engine_runs_32_token_kv_blocks_unless_told_otherwise():
    """vLLM's CPU default block is 128 tokens; the hybrid engine asks for 32 (faster decode steps,
    rollout/vllm_args.py), and a block_size in engine_kwargs.vllm wins; null keeps ours, as a null
    value means the engine's own choice."""
    assert not dev.has_accelerator()
    assert engine_kwargs(tiny_model("/m"), tiny_rollout(), False)["block_size"] == 32
    for value, expect in ((64, 64), (None, 32)):
        rollout = tiny_rollout()
        rollout.engine_kwargs.vllm = {"block_size": value}
        assert engine_kwargs(tiny_model("/m"), rollout, False)["block_size"] == expect


def test_tensor_parallel_runs_without_vllms_custom_all_reduce():
    """Each Ray worker sees only its own GPU, so the TP ranks cannot map each other's buffers: verl
    turns vLLM's custom all-reduce off, and so does the hybrid engine, at verl's TP=2 and at 1."""
    for tp in (2, 1):
        rollout = tiny_rollout()
        rollout.tensor_model_parallel_size = tp
        kwargs = engine_kwargs(tiny_model("/m"), rollout, enable_sleep_mode=True)
        assert kwargs["disable_custom_all_reduce"] is True and kwargs["tensor_parallel_size"] == tp


@pytest.mark.skipif(not vllm_available(), reason="checked only with the vLLM rollout")
def test_engine_kwargs_the_hybrid_engine_sets_are_refused_with_the_key_to_use():
    cfg = load_config(
        [
            "actor_rollout_ref.rollout.name=vllm",
            "+actor_rollout_ref.rollout.engine_kwargs.vllm.tensor_parallel_size=2",
            "+actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend=mp",
        ],
        "demo",
    )
    with pytest.raises(ConfigError) as info:
        prepare(cfg, num_gpus=0)
    problems = "\n".join(info.value.problems)
    assert (
        "engine_kwargs.vllm.tensor_parallel_size is not supported by verl_lite: set "
        "actor_rollout_ref.rollout.tensor_model_parallel_size" in problems
    )
    assert (
        "engine_kwargs.vllm.distributed_executor_backend is not supported by verl_lite: the hybrid engine"
        in problems
    )


@pytest.mark.skipif(not vllm_available(), reason="checked only with the vLLM rollout")
def test_a_cpu_kv_block_vllm_cannot_run_is_refused_at_start_up():
    cfg = load_config(
        [
            "actor_rollout_ref.rollout.name=vllm",
            "+actor_rollout_ref.rollout.engine_kwargs.vllm.block_size=48",
        ],
        "demo",
    )
    with pytest.raises(ConfigError) as info:
        prepare(cfg, num_gpus=0)
    assert any(
        p.startswith("actor_rollout_ref.rollout.engine_kwargs.vllm.block_size=48: vLLM's CPU attention takes")
        for p in info.value.problems
    ), info.value.problems

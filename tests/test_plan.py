"""The memory planner: the issue's sanity targets on real shapes, and the CLI through Hydra."""

import os
import subprocess
import sys

import pytest

from verl_lite.config.compose import load_config
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.engine.memory_model import read_shape
from verl_lite.plan import micro_candidates, plan_rows, recommend

CONFIGS = os.path.join(os.path.dirname(__file__), os.pardir, "scripts", "model_configs")
SEVEN_B = os.path.join(CONFIGS, "qwen2.5-7b")


def _config(world: int, prompts: int) -> PPOTrainerConfig:
    """A GSM8K-like GRPO run: 512+512 tokens, bf16 compute and rollout, gradient checkpointing."""
    cfg = load_config()  # verl's defaults, resolved
    cfg.trainer.n_gpus_per_node = world
    cfg.data.max_prompt_length = cfg.data.max_response_length = 512
    cfg.data.train_batch_size = prompts
    arr = cfg.actor_rollout_ref
    arr.model.path = SEVEN_B
    arr.model.enable_gradient_checkpointing = True
    arr.rollout.n, arr.rollout.dtype, arr.rollout.tensor_model_parallel_size = 4, "bf16", 1
    arr.actor.ppo_mini_batch_size = prompts // 2
    arr.actor.fsdp_config.mixed_precision.param_dtype = "bf16"
    return cfg


def test_one_24gb_card_offloads_params_and_optimizer_with_micro_2_to_4():
    cfg = _config(world=1, prompts=16)
    cfg.actor_rollout_ref.rollout.name = "hf"  # its bf16 weight copy (15 GB) stays through the update
    rec = recommend(cfg, read_shape(SEVEN_B), world=1, budget_gb=24)
    assert rec.mode == "offload_policy" and 2 <= rec.micro <= 4, rec.reason
    assert rec.overrides["actor.fsdp_config.offload_policy"] is True
    assert rec.overrides["actor.ppo_micro_batch_size_per_gpu"] == rec.micro
    assert "none, param_optimizer_offload do not fit" in rec.reason


def test_a_sleeping_vllm_leaves_the_update_more_room_than_an_awake_one():
    cfg = _config(world=1, prompts=16)
    r = cfg.actor_rollout_ref.rollout
    r.name, r.free_cache_engine = "vllm", True
    asleep = recommend(cfg, read_shape(SEVEN_B), world=1, budget_gb=24)
    r.name = "hf"
    hf = recommend(cfg, read_shape(SEVEN_B), world=1, budget_gb=24)
    assert asleep.mode == hf.mode == "offload_policy"
    assert asleep.micro > hf.micro, (asleep.reason, hf.reason)
    r.name, r.free_cache_engine = "vllm", False  # weights and KV cache stay: nothing fits
    with pytest.raises(ValueError, match="no offload mode fits"):
        recommend(cfg, read_shape(SEVEN_B), world=1, budget_gb=24)


def test_eight_80gb_cards_need_no_offload():
    cfg = _config(world=8, prompts=64)
    rec = recommend(cfg, read_shape(SEVEN_B), world=8, budget_gb=80)
    assert rec.mode == "none", rec.reason
    assert rec.overrides["actor.fsdp_config.param_offload"] is False
    assert rec.overrides["actor.fsdp_config.optimizer_offload"] is False


def test_rows_cover_every_mode_and_micro_size():
    cfg = _config(world=1, prompts=16)
    assert micro_candidates(cfg, 1) == [1, 2, 4, 8, 16, 32]
    rows = plan_rows(cfg, read_shape(SEVEN_B), 1, 24)
    assert [(r.mode, r.micro) for r in rows][:2] == [("none", 1), ("none", 2)]
    assert len(rows) == 3 * 6
    policy = [r.estimate.activations for r in rows if r.mode == "offload_policy"]
    assert policy == sorted(policy) and policy[0] < policy[-1]


def test_nothing_fits_says_what_to_change():
    with pytest.raises(ValueError, match="no offload mode fits 2.00 GB per device.*n_gpus_per_node"):
        recommend(_config(world=1, prompts=16), read_shape(SEVEN_B), world=1, budget_gb=2)


def test_cli_takes_hydra_overrides_and_prints_the_table():
    cmd = [
        sys.executable,
        "-m",
        "verl_lite.plan",
        "--device-memory-gb",
        "24",
        f"actor_rollout_ref.model.path={SEVEN_B}",
        "trainer.n_gpus_per_node=1",
        "data.train_batch_size=16",
        "data.max_prompt_length=512",
        "data.max_response_length=512",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.dtype=bf16",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "7.616B params" in out and "1 devices of 24.00 GB" in out
    for mode in ("none", "param_optimizer_offload", "offload_policy"):
        assert mode in out
    assert "recommendation: none, param_optimizer_offload do not fit" in out
    assert "actor_rollout_ref.actor.fsdp_config.offload_policy=True" in out
    bad = subprocess.run([*cmd, "trainer.no_such_key=1"], capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "no_such_key" in bad.stderr

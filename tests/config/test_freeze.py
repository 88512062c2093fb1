"""The config is frozen before workers exist: no assignment anywhere in the tree, also in the
copies Ray workers receive; planner-style overrides before the freeze move linked keys too."""

import dataclasses
import pickle

import cloudpickle
import pytest

from verl_lite.config.compose import load_config
from verl_lite.config.freeze import FrozenConfigError, freeze, is_frozen
from verl_lite.config.overrides import apply_to_config

ARR = "actor_rollout_ref"


@pytest.fixture
def frozen():
    return freeze(load_config([], "demo"))


def test_no_key_of_a_frozen_config_can_be_set_or_mutated(frozen):
    with pytest.raises(FrozenConfigError, match=f"config key {ARR}.actor.ppo_epochs is frozen"):
        frozen.actor_rollout_ref.actor.ppo_epochs = 2
    with pytest.raises(FrozenConfigError, match=f"config key {ARR}.actor.fsdp_config is frozen"):
        frozen.actor_rollout_ref.actor.fsdp_config = None
    with pytest.raises(FrozenConfigError, match="trainer.logger"):
        frozen.trainer.logger.append("wandb")
    with pytest.raises(FrozenConfigError, match=f"{ARR}.model.override_config"):
        frozen.actor_rollout_ref.model.override_config["x"] = 1
    with pytest.raises(FrozenConfigError):
        del frozen.trainer.test_freq
    assert frozen.trainer.logger == ["console", "file"]  # still equal to plain lists


@pytest.mark.parametrize(
    "dumps, loads", [(pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)]
)
def test_what_a_worker_receives_is_frozen_too(frozen, dumps, loads):
    section = loads(dumps(frozen.actor_rollout_ref))
    assert is_frozen(section) and is_frozen(section.rollout)
    with pytest.raises(FrozenConfigError, match=f"{ARR}.rollout.n"):
        section.rollout.n = 3
    with pytest.raises(FrozenConfigError):
        section.actor.checkpoint.save_contents.append("hf_model")
    assert section == frozen.actor_rollout_ref


def test_a_changed_copy_is_a_new_unfrozen_object(frozen):
    copy = dataclasses.replace(frozen.trainer, test_freq=5)
    assert copy.test_freq == 5 and frozen.trainer.test_freq == 20 and not is_frozen(copy)


def test_overrides_before_the_freeze_move_the_keys_linked_to_them():
    cfg = load_config(["algorithm.adv_estimator=gae"], "demo")  # demo: critic micro links the actor's
    apply_to_config(
        cfg, {f"{ARR}.actor.ppo_micro_batch_size_per_gpu": 4, f"{ARR}.actor.fsdp_config.offload_policy": True}
    )
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 4
    assert cfg.critic.ppo_micro_batch_size_per_gpu == cfg.critic.forward_micro_batch_size_per_gpu == 4
    assert cfg.actor_rollout_ref.actor.fsdp_config.offload_policy is True
    assert cfg.critic.fsdp.offload_policy is False  # not linked: unchanged
    explicit = load_config(["critic.ppo_micro_batch_size_per_gpu=8"], "demo")
    apply_to_config(explicit, {f"{ARR}.actor.ppo_micro_batch_size_per_gpu": 4})
    assert explicit.critic.ppo_micro_batch_size_per_gpu == 8  # set on the command line: not a link any more
    with pytest.raises(KeyError, match="no_such_key"):
        apply_to_config(cfg, {"trainer.no_such_key": 1})
    freeze(cfg)
    with pytest.raises(FrozenConfigError):
        apply_to_config(cfg, {"trainer.test_freq": 1})

"""The one gate (config/features.py): which keys a run reads."""

from __future__ import annotations

from verl_lite.config import features
from verl_lite.config.compose import compose_config


def test_feature_names_are_unique():
    """The reader keeps each feature's state by its name."""
    names = [f.name for f in features.FEATURES]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_before_the_roles_are_decided_a_role_s_keys_count_as_read_and_the_others_follow_their_switch():
    reads = features.reader(compose_config(["reward_model.enable=False"], "demo"), None)
    assert reads("critic.strategy") and reads("actor_rollout_ref.ref.strategy")  # by the run: read
    assert not reads("reward_model.strategy")  # the reward model is off
    assert reads("reward_model.enable")  # a switch is always read
    legacy = features.reader(
        compose_config(["reward_model.enable=True"], "demo"), None
    )  # demo: no reward loop
    assert legacy("reward_model.strategy") and legacy("reward_model.model.input_tokenizer")
    loop = features.reader(
        compose_config(["reward_model.enable=True", "reward_model.use_reward_loop=True"], "demo"), None
    )
    assert not loop("reward_model.model.input_tokenizer")  # verl's reward loop does not read it

"""The one gate (config/features.py): which keys a run reads, from the gates declared beside the
schema's fields (config/gates.py)."""

from __future__ import annotations

from verl_lite.config import features, gates, keys
from verl_lite.config.compose import compose_config


def test_every_gate_covers_a_field_and_its_switches_are_keys_under_it():
    declared = {g for gs in features.GATED.values() for g in gs}
    defined = {v for v in vars(gates).values() if isinstance(v, gates.Gate)}
    assert defined == declared, sorted(g.name for g in defined ^ declared)
    for key, on in features.GATED.items():
        for gate in on:
            assert all(keys.is_known(f"{key}.{s}") for s in gate.switches), (key, gate.name)


def test_a_key_is_read_only_while_every_gate_above_it_is_on():
    cfg = compose_config(["critic.enable=True", "critic.use_dynamic_bsz=False"], "demo")
    reads = features.reader(cfg, None)
    assert reads("critic.ppo_micro_batch_size_per_gpu") and not reads("critic.ppo_max_token_len_per_gpu")
    assert not reads("actor_rollout_ref.actor.kl_loss_coef")  # the demo: no KL loss
    assert reads("algorithm.filter_groups.enable") and not reads("algorithm.filter_groups.metric")
    on = features.reader(compose_config(["algorithm.filter_groups.enable=True"], "demo"), None)
    assert on("algorithm.filter_groups.metric")


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

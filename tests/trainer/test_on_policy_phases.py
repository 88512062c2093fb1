"""Which log-prob passes a step runs: no old-log-prob phase when the update is exactly on-policy
(one mini-batch, one epoch) and nothing before it reads the old log-probs; otherwise one phase that
gives the actor's and (with a reference) the reference's log-probs in one call. Built through the
CLI's start-up path, without Ray."""

import pytest

from tests.trainer.test_extensions import ARR, load
from verl_lite.main_ppo import build_trainer


def _phases(tmp_path, *overrides):
    trainer = build_trainer(load(tmp_path, "algorithm.adv_estimator=grpo", *overrides))
    return trainer.on_policy_update, [name for name, _ in trainer.phases]


@pytest.mark.parametrize(
    "overrides, on_policy",
    [
        ([], True),  # train_batch_size 4 = ppo_mini_batch_size 4, one epoch
        ([f"{ARR}.actor.use_kl_loss=True"], True),  # the reference pass joins update_actor's call
        ([f"{ARR}.actor.ppo_epochs=2"], False),
        (["data.train_batch_size=8"], False),  # two mini-batches
        (["algorithm.use_kl_in_reward=True"], False),  # the reward reads old and ref log-probs
        ([f"{ARR}.actor.calculate_sum_pi_squared=True"], False),  # the variance proxy reads them
    ],
)
def test_old_log_prob_pass_only_when_the_update_is_not_on_policy(tmp_path, overrides, on_policy):
    reuses, phases = _phases(tmp_path, *overrides)
    assert reuses == on_policy
    assert ("old_log_prob" in phases) != on_policy
    assert "ref" not in phases, "the reference's pass always shares a call with another phase"


def test_an_estimator_reading_old_log_probs_keeps_the_pass(tmp_path):
    trainer = build_trainer(
        load(
            tmp_path,
            "algorithm.adv_estimator=optimal_token_baseline",
            f"{ARR}.actor.calculate_sum_pi_squared=True",
        )
    )
    assert not trainer.on_policy_update and "old_log_prob" in [name for name, _ in trainer.phases]

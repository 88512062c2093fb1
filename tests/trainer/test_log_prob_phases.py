"""Which log-prob passes a step runs: no old-log-prob phase when nothing before the update reads the
old log-probs (update_actor makes them: the first mini-batch's from its own forward, the other rows'
in the same call), whatever the mini-batches and epochs; otherwise one phase that gives the actor's
and (with a reference) the reference's log-probs in one call. Built through the CLI's start-up path,
without Ray."""

import pytest

from tests.trainer.test_extensions import ARR, load
from verl_lite.main_ppo import build_trainer


def _phases(tmp_path, *overrides):
    trainer = build_trainer(load(tmp_path, "algorithm.adv_estimator=grpo", *overrides))
    return trainer.step_phases.old_log_probs_in_update, [name for name, _ in trainer.phases]


@pytest.mark.parametrize(
    "overrides, in_update",
    [
        ([], True),  # train_batch_size 4 = ppo_mini_batch_size 4, one epoch
        ([f"{ARR}.actor.use_kl_loss=True"], True),  # the reference pass joins update_actor's call
        ([f"{ARR}.actor.ppo_epochs=2"], True),  # the first mini-batch's kept for the second epoch
        (["data.train_batch_size=8"], True),  # two mini-batches: the second's in update_actor's call
        (["algorithm.use_kl_in_reward=True"], False),  # the reward reads old and ref log-probs
        ([f"{ARR}.actor.calculate_sum_pi_squared=True"], False),  # the variance proxy reads them
    ],
)
def test_old_log_prob_phase_only_when_read_before_the_update(tmp_path, overrides, in_update):
    reuses, phases = _phases(tmp_path, *overrides)
    assert reuses == in_update
    assert ("old_log_prob" in phases) != in_update
    assert "ref" not in phases, "the reference's pass always shares a call with another phase"


def test_an_estimator_reading_old_log_probs_keeps_the_pass(tmp_path):
    trainer = build_trainer(
        load(
            tmp_path,
            "algorithm.adv_estimator=optimal_token_baseline",
            f"{ARR}.actor.calculate_sum_pi_squared=True",
        )
    )
    assert not trainer.step_phases.old_log_probs_in_update and "old_log_prob" in [
        name for name, _ in trainer.phases
    ]

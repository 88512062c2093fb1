"""An agent loop written for verl trains through the real CLI (issue 37 part 2's done-when): two
GRPO steps on two CPU workers, the user's file tests/agent_loop/verl_style_loops.py (imports from
`verl.*`, `@register`, verl's constructor and Continuous Token helpers, reading self.config) named
by agent_loop_config_path and run for every row as the default loop. It checks the worker side of
the contract the in-process test (tests/agent_loop/test_verl_loops.py) cannot: the whole trainer
config reaches the loop through Ray, and the trained tokens are the ones the rollout sampled (the
actor's log-probs match). The run joins the tests' shared Ray cluster."""

import math

import pytest

from tests.helpers.agent import write_yaml
from tests.test_main_ppo import SMALL, read_metrics, run_cli

pytestmark = pytest.mark.slow
AGENT = "actor_rollout_ref.rollout.agent"


def test_a_verl_style_loop_trains_two_steps(tmp_path):
    loops = write_yaml(
        tmp_path / "loops.yaml",
        [
            {
                "name": "ask_twice",
                "_target_": "tests.agent_loop.verl_style_loops.AskTwiceAgentLoop",
                "follow_up": "Are you sure?",
            }
        ],
    )
    overrides = [f"{AGENT}.agent_loop_config_path={loops}", f"{AGENT}.default_agent_loop=ask_twice"]
    no_validation = ["trainer.val_before_train=False", "trainer.test_freq=-1"]
    proc = run_cli(tmp_path, *SMALL, *overrides, *no_validation, join=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2], [r["step"] for r in rows]
    for row in rows:
        assert row["num_turns/mean"] == 4, row  # the loop's own count, as verl reports it
        assert 0 < row["agent_loop/masked_response_token_ratio"] < 1, row  # the follow-up turn, mask 0
        assert row["rollout/actor_logprob_abs_diff_max"] < 1e-3, row  # trained on what was sampled
        assert math.isfinite(row["actor/grad_norm"]) and math.isfinite(row["actor/pg_loss"]), row
    assert "Traceback" not in proc.stderr

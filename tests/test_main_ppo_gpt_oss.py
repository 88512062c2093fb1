"""A gpt-oss-format model trains through the real CLI with `multi_turn.format=gpt-oss`: the tool demo
(conf/tool_demo.yaml: the calculator, two CPU workers, vLLM) with its model swapped for a tiny one
that writes OpenAI's harmony format (tests/helpers/gpt_oss_model.py, warm-started in the session,
~10-30 s). Two GRPO steps. The model's calls end with <|call|>, which stops vLLM
(generation_config.json, as in gpt-oss's folder); the gpt-oss parser reads them; the calculator runs
them; the replies go in as `<|start|>functions.calc to=assistant...` (data/chat_render.py) and are
masked; the update runs. The rollout dump shows a call's expression and the reply the tool gave it.
"""

import json
import math
import re

import pytest

from tests.helpers.gpt_oss_model import calculator_model_dir
from tests.test_main_ppo import read_metrics, run_cli
from tests.test_main_ppo_tool_demo import SMALL

pytest.importorskip("vllm", reason="the vLLM rollout needs vllm (make install)")
pytestmark = pytest.mark.slow

# decoded without special tokens (the dump's text, as verl's): the call's JSON, then the inserted reply
# (its text as it is, as verl writes a gpt-oss tool reply: not JSON-quoted)
CALL_THEN_REPLY = re.compile(r'\{"expression": "(\d+)\*(\d+)"\}functions\.calc to=assistantcommentary(-?\d+)')


def test_a_gpt_oss_model_calls_the_calculator_and_trains_two_steps(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpt_oss")
    model = calculator_model_dir(str(tmp / "model"))
    dump = tmp / "rollouts"
    proc = run_cli(
        tmp,
        *[o for o in SMALL if not o.startswith(("trainer.test_freq", "data.val_max_samples"))],
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        f"trainer.rollout_data_dir={dump}",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.rollout.multi_turn.format=gpt-oss",
        # the sanity check renders the conversation whole with the template: the sampled harmony
        # markup is not in the messages' text, so every trajectory would differ (docs/multi_turn.md)
        "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode=disable",
        # the warm start teaches the call, not the copy of the product: every answer may score 0 and
        # leave GRPO no advantage; an entropy bonus keeps the update's gradient nonzero on the tokens
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        config_name="tool_demo",
        join=True,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = read_metrics(tmp)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        bad = {k: v for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)}
        assert not bad, bad
        assert row["num_turns/max"] >= 4, row  # call, reply, answer
        # the warm start calls in most trajectories; step 2 samples after an update whose only gradient
        # is the entropy bonus (every answer scored 0 here), which makes the tiny model call less often
        assert row["tool_call_counts/mean"] > (0.5 if row["step"] == 1 else 0.25), row
        # sampled at temperature 1 the model now and then writes a malformed call or a misspelt name or
        # expression: answered with an error message and counted; no tool timed out
        assert row["agent_loop/num_malformed_tool_calls"] <= row["agent_loop/num_tool_errors"] < 16, row
        assert row["agent_loop/num_tool_timeouts"] == 0, row
        assert 0 < row["agent_loop/masked_response_token_ratio"] < 1, row  # the replies are masked
        assert row["rollout/actor_logprob_abs_diff_max"] < 1e-3, row  # fp32: vLLM sampled the actor
        assert math.isfinite(row["actor/pg_loss"]) and 0 < row["actor/grad_norm"] < math.inf, row
    lines = [json.loads(line) for step in (1, 2) for line in open(dump / f"{step}.jsonl")]
    executed = [m.groups() for line in lines for m in CALL_THEN_REPLY.finditer(line["output"])]
    assert executed, [line["output"] for line in lines[:3]]
    # the calculator computed what the model asked: the parsed arguments reached the tool
    assert all(int(a) * int(b) == int(product) for a, b, product in executed), executed[:5]
    assert "Traceback" not in proc.stderr

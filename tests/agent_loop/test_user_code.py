"""A user's loop or interaction that would hang the rollout or end the worker, on a scripted engine:
each fails the rollout within its deadline with one line naming the class and the call
(agent_loop/scheduler.py's loop_timeout, tool_agent.py's interaction calls, runner.py's exits), and
an interaction's non-finite score is refused where it enters."""

import time

import pytest

from tests.agent_loop.scripted import ScriptedRollout, prompt_batch, tool_tokenizer
from tests.agent_loop.user_loops import THREAD_SECONDS
from tests.helpers.agent import write_yaml
from tests.helpers.configs import tiny_rollout
from verl_lite.agent_loop.runner import AgentLoopRunner
from verl_lite.agent_loop.scheduler import LoopTimeout
from verl_lite.rollout.base import SamplingParams

P, R = 24, 40
QUESTION = [{"role": "user", "content": "3+4="}]
LOOPS = "tests.agent_loop.user_loops"
INTERACTIONS = "tests.interactions.user_interactions"


def run(
    tmp_path,
    agent_name,
    scripts,
    loop_timeout=600.0,
    tool_call_timeout=60.0,
    interaction=None,
    interaction_class="MisbehavingInteraction",
):
    tok = tool_tokenizer()
    cfg = tiny_rollout(prompt_length=P, response_length=R)
    cfg.agent.loop_timeout, cfg.multi_turn.tool_call_timeout = loop_timeout, tool_call_timeout
    cfg.agent.agent_loop_config_path = write_yaml(
        tmp_path / "loops.yaml",
        [
            {"name": f"{how}_loop", "_target_": f"{LOOPS}.MisbehavingLoop", "how": how}
            for how in ("hang", "hang_thread", "exit", "nan", "empty", "beyond_vocab")
        ],
    )
    if interaction is not None:
        cfg.multi_turn.interaction_config_path = write_yaml(
            tmp_path / "interaction.yaml",
            {
                "interaction": [
                    {
                        "name": "user",
                        "class_name": f"{INTERACTIONS}.{interaction_class}",
                        "config": {"how": interaction},
                    }
                ]
            },
        )
    runner = AgentLoopRunner(ScriptedRollout(tok, scripts), tok, cfg)
    n = len(scripts)
    batch = prompt_batch(
        tok,
        [QUESTION] * n,
        P,
        agent_name=[agent_name] * n,
        index=list(range(n)),
        extra_info=[{"interaction_kwargs": {"name": "user"}}] * n,
    )
    return runner.run(batch, SamplingParams(n=1, temperature=1.0, response_length=R))


def test_a_loop_that_awaits_forever_fails_the_rollout_at_loop_timeout_naming_it(tmp_path):
    start = time.perf_counter()
    with pytest.raises(LoopTimeout) as info:
        run(tmp_path, "hang_loop", [["7"], ["7"], ["7"]], loop_timeout=0.3)
    assert time.perf_counter() - start < 10
    message = str(info.value)
    assert "1 trajectories' agent loops neither generated nor finished within 0.3 s" in message, message
    assert "(actor_rollout_ref.rollout.agent.loop_timeout)" in message, message
    # the one that hangs is trajectory 1 (row index 1); where it waits is its own run method
    assert (
        f"trajectory 1 (agent loop 'hang_loop', {LOOPS}.MisbehavingLoop) waits in MisbehavingLoop.run ("
        in message
    )
    assert "user_loops.py:" in message


def test_a_loop_stuck_in_a_thread_fails_at_loop_timeout_without_waiting_for_the_thread(tmp_path):
    """asyncio.run would join the default executor and so wait THREAD_SECONDS (forever, for a thread
    that never returns); the rollout ends at loop_timeout and leaves the thread to end by itself."""
    start = time.perf_counter()
    with pytest.raises(LoopTimeout) as info:
        run(tmp_path, "hang_thread_loop", [["7"], ["7"]], loop_timeout=0.3)
    seconds = time.perf_counter() - start
    assert seconds < THREAD_SECONDS - 1, f"the rollout waited {seconds:.1f} s for the loop's thread"
    assert "trajectory 1 (agent loop 'hang_thread_loop'" in str(info.value), info.value


def test_a_loop_that_calls_sys_exit_fails_the_rollout_naming_its_class_and_file(tmp_path):
    with pytest.raises(RuntimeError) as info:
        run(tmp_path, "exit_loop", [["7"]])
    message = str(info.value)
    assert f"agent loop 'exit_loop' ({LOOPS}.MisbehavingLoop, " in message, message
    assert "tests/agent_loop/user_loops.py) called sys.exit(0), which would end the worker" in message, (
        message
    )


@pytest.mark.parametrize("how", ["hang", "block"])
def test_an_interaction_that_never_answers_fails_at_tool_call_timeout(tmp_path, how):
    start = time.perf_counter()
    with pytest.raises(RuntimeError) as info:
        run(tmp_path, "tool_agent", [["7<|im_end|>"]], tool_call_timeout=0.3, interaction=how)
    assert time.perf_counter() - start < 4, "the deadline, not the interaction, ends the wait"
    assert str(info.value) == (
        f"interaction {INTERACTIONS}.MisbehavingInteraction.generate_response did not return within 0.3 s "
        "(actor_rollout_ref.rollout.multi_turn.tool_call_timeout)"
    )


def test_an_interaction_that_calls_sys_exit_fails_the_rollout_naming_it(tmp_path):
    with pytest.raises(RuntimeError) as info:
        run(tmp_path, "tool_agent", [["7<|im_end|>"]], interaction="exit")
    assert str(info.value) == (
        f"interaction {INTERACTIONS}.MisbehavingInteraction.generate_response: the call called sys.exit(3), "
        "which would end the worker"
    )


def test_an_interaction_score_of_nan_is_refused_where_it_enters(tmp_path):
    with pytest.raises(ValueError) as info:
        run(tmp_path, "tool_agent", [["7<|im_end|>"]], interaction="nan")
    assert (
        "MisbehavingInteraction.generate_response returned the score nan; it must be a finite number"
        in str(info.value)
    )


def test_a_loop_reward_score_of_nan_is_refused_where_it_enters(tmp_path):
    with pytest.raises(ValueError) as info:
        run(tmp_path, "nan_loop", [["7"], ["7"]])
    assert str(info.value).startswith(
        "agent loop output 0 (agent loop 'nan_loop'): reward_score=nan must be a finite number"
    ), info.value


def test_a_batch_without_one_policy_token_is_refused(tmp_path):
    with pytest.raises(ValueError) as info:
        run(tmp_path, "empty_loop", [["7"], ["7"]])
    assert "no trajectory of the batch (2) has a token sampled by the policy" in str(info.value)
    assert "['empty_loop']" in str(info.value)


def test_a_token_id_outside_the_vocabulary_is_refused_before_the_update(tmp_path):
    with pytest.raises(ValueError) as info:
        run(tmp_path, "beyond_vocab_loop", [["7"]])
    tok = tool_tokenizer()
    assert str(info.value) == (
        f"agent loop output 0 (agent loop 'beyond_vocab_loop'): response_ids[1]=1000000 is outside the model's "
        f"vocabulary [0, {len(tok)}) (1 such ids); a loop must return token ids of the model's tokenizer"
    )


def test_an_interaction_gets_the_request_id_and_a_turn_without_a_score_is_skipped(tmp_path):
    """verl's ToolAgentLoop (before verl#6074 removed interactions) called start_interaction(request_id,
    **interaction_kwargs), ignored its return, and appended a turn's score only when it was not None."""
    out = run(
        tmp_path,
        "tool_agent",
        [["7<|im_end|>", "7<|im_end|>"]] * 2,
        interaction="-",
        interaction_class="RequestKeyedInteraction",
    )
    assert [list(s) for s in out.non_tensor_batch["turn_scores"]] == [[1.0], [1.0]]
    assert out.non_tensor_batch["__num_turns__"].tolist() == [5, 5]

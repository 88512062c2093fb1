"""The reward function is called as verl 0.9.1 calls it: by keyword (data_source=, solution_str=,
ground_truth=, extra_info=), with custom_reward_function.reward_kwargs merged in (they win), and
awaited when it is an `async def`, every row of the batch at once (verl's reward loop,
experimental/reward_loop/reward_manager/naive.py; trainer/ppo/reward.py get_custom_reward_fn). A
function that cannot take that call is refused when it is loaded, as verl would fail at its first
sample. The functions are real files, loaded as the CLI loads them.
"""

import time

import pytest

from tests.helpers.models import response_batch
from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.reward.naive import NaiveRewardManager, RewardError
from verl_lite.reward.scorers import load_custom_scorer

WIDTH = 6


def scorer(tmp_path, text: str, name: str = "compute_score", reward_kwargs=None):
    path = tmp_path / "reward.py"
    path.write_text(text)
    return load_custom_scorer(str(path), name, reward_kwargs)


def score(fn, responses=("46", "7")):
    tok = build_tokenizer()
    return NaiveRewardManager(tok, fn)(response_batch(tok, list(responses), WIDTH))


def test_parameters_in_another_order_get_verls_keywords(tmp_path):
    fn = scorer(
        tmp_path,
        "def compute_score(solution_str, ground_truth, data_source=None, extra_info=None, **kw):\n"
        "    return {'score': float(solution_str == ground_truth), 'source': data_source,\n"
        "            'turns': extra_info['num_turns'], 'other': sorted(kw)}\n",
    )
    rewards, extra = score(fn)
    assert rewards.sum(-1).tolist() == [1.0, 0.0]  # the arith rows' ground truth is 46
    assert extra == {
        "score": [1.0, 0.0],
        "source": ["verl_lite/arith"] * 2,
        "turns": [2, 2],
        "other": [[], []],
    }


@pytest.mark.parametrize(
    "signature, missing",
    [
        ("data_source, solution_str, ground_truth", "extra_info"),  # the most common port error
        ("solution_str, ground_truth, extra_info=None", "data_source"),
        ("data_source, solution_str, ground_truth, extra_info, /", "positional only"),
        ("ds, text, truth, info=None", "missing a required argument: 'ds'"),
    ],
)
def test_a_function_that_cannot_take_verls_call_is_refused_when_loaded(tmp_path, signature, missing):
    with pytest.raises(ValueError) as info:
        scorer(tmp_path, f"def compute_score({signature}):\n    return 0.0\n")
    message = str(info.value)
    assert message.startswith(f"custom_reward_function.name='compute_score' in {tmp_path / 'reward.py'} is ")
    assert "cannot take verl's call compute_score(data_source=..., solution_str=..." in message
    assert missing in message and "extra_info=None)`, or a **kwargs" in message


def test_reward_kwargs_reach_every_call_and_win(tmp_path):
    text = (
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):\n"
        "    return float(solution_str == ground_truth) + bonus\n"
    )
    rewards, _ = score(scorer(tmp_path, text, reward_kwargs={"bonus": 0.5, "ground_truth": "7"}))
    assert rewards.sum(-1).tolist() == [0.5, 1.5]  # ground_truth is overridden to "7", as verl merges
    with pytest.raises(ValueError, match=r"plus custom_reward_function.reward_kwargs \['penalty'\]"):
        scorer(tmp_path, text, reward_kwargs={"penalty": 1.0})


ASYNC = """\
import asyncio

in_flight, most = 0, 0

async def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    global in_flight, most
    in_flight += 1
    most = max(most, in_flight)
    await asyncio.sleep(0.05 if solution_str != "hang" else 60)
    in_flight -= 1
    if solution_str == "boom":
        raise KeyError(solution_str)
    return float(solution_str == ground_truth)
"""


def test_an_async_function_is_awaited_for_every_row_at_once(tmp_path):
    fn = scorer(tmp_path, ASYNC)
    rewards, _ = score(fn, ["46", "7", "46", "1"])
    assert rewards.sum(-1).tolist() == [1.0, 0.0, 1.0, 0.0]
    assert fn.__globals__["most"] == 4  # the four rows were in flight together
    with pytest.raises(RewardError, match=r"raised KeyError: 'boom' on batch row 1 .*response='boom'"):
        score(fn, ["46", "boom"])


def test_an_async_function_past_the_timeout_ends_the_batch(tmp_path):
    tok = build_tokenizer()
    manager = NaiveRewardManager(tok, scorer(tmp_path, ASYNC, reward_kwargs={}))
    manager.timeout = 0.5
    start = time.perf_counter()
    with pytest.raises(
        RewardError, match=r"within reward_model.timeout=0.5 s \(it was scoring the batch's 2 rows at once\)"
    ):
        manager(response_batch(tok, ["46", "hang"], WIDTH))
    assert time.perf_counter() - start < 10

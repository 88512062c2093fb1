"""The GSM8K tool: verl's messages, step rewards and final reward, one instance per trajectory."""

import asyncio

import pytest

from tests.helpers.agent import schema
from verl_lite.tools.gsm8k import Gsm8kTool
from verl_lite.tools.schema import ToolSchema


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def tool():
    return Gsm8kTool({"type": "native"}, ToolSchema.from_dict(schema("calc_gsm8k_reward", {"answer": "a"})))


def test_scores_submissions_and_penalises_no_improvement(tool):
    a, _ = run(tool.create(create_kwargs={"ground_truth": "72"}))
    b, _ = run(tool.create(ground_truth="5"))  # old verl's spelling: the kwarg itself
    response, step, _ = run(tool.execute(a, {"answer": "70"}))
    assert response.text == "Current parsed answer='70' reward=0.0" and step == -0.05
    response, step, _ = run(tool.execute(a, {"answer": "#### 72"}))
    assert response.text == "Current parsed answer='#### 72' reward=1.0" and step == 0.0
    _, step, _ = run(tool.execute(a, {"answer": 72}))  # right again, no better: penalised
    assert step == -0.05
    assert run(tool.calc_reward(a)) == 1.0 and run(tool.calc_reward(b)) == 0.0
    run(tool.release(a))
    with pytest.raises(KeyError):
        run(tool.calc_reward(a))


def test_no_ground_truth_is_an_error(tool):
    with pytest.raises(ValueError, match="create_kwargs must hold ground_truth"):
        run(tool.create(create_kwargs={}))

"""agent_loop/assemble.py's vocabulary check on the padded batch: padding is not checked, and the
first trajectory with an id outside [0, vocab_size) is named with the field, the index in the
loop's own list, the id and how many such ids it has."""

import pytest

from verl_lite.agent_loop.assemble import assemble_outputs
from verl_lite.agent_loop.base import AgentLoopOutput

V, PAD = 50, 49


def _out(prompt, response) -> AgentLoopOutput:
    return AgentLoopOutput(prompt, response, [1] * len(response), [0.0] * len(response), num_turns=2)


def test_ids_in_the_vocabulary_pass_whatever_the_padding():
    outs = [_out([1, 2], [3, 4, 5]), _out([7], [V - 1]), _out([0, 0, 0], [0])]
    batch = assemble_outputs(outs, 4, 5, PAD, ["a", "b", "c"], V)
    assert batch["responses"].shape == (3, 5)


@pytest.mark.parametrize(
    "outs, message",
    [
        (
            [_out([1, 2], [3]), _out([1], [4]), _out([1, -1, V], [5])],
            "agent loop output 2 (agent loop 'c'): prompt_ids[1]=-1 is outside the model's vocabulary [0, 50) "
            "(2 such ids)",
        ),
        (
            [_out([1, 2], [3]), _out([1], [4, V + 7, 5, V]), _out([1, -1], [5])],
            "agent loop output 1 (agent loop 'b'): response_ids[1]=57 is outside the model's vocabulary [0, 50) "
            "(2 such ids)",
        ),
    ],
)
def test_the_first_trajectory_with_an_id_outside_is_named(outs, message):
    with pytest.raises(ValueError) as info:
        assemble_outputs(outs, 4, 5, PAD, ["a", "b", "c"], V)
    assert str(info.value) == message + "; a loop must return token ids of the model's tokenizer"

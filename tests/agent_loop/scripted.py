"""A rollout backend that replays scripted generations, for hand-worked agent-loop tests.

The loop's logic (what is inserted where, what the mask and log-probs are, which requests go out
in which turn) is checked against numbers worked out by hand; the engines themselves are checked
against their own output ids in test_engines.py. Each trajectory's script is a list of model
turns (text); turn k of trajectory t answers its k-th request with that text's ids and log-probs
-(t + 1) / 100 - k / 10 - i / 1000 for its i-th token, cut to the request's budget like an engine
(a round's continuation, keyed by the tokens it starts after, gets the rest of the turn).
"""

from __future__ import annotations

import torch

from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.data.tool_chat_template import TOOL_CHAT_TEMPLATE
from verl_lite.protocol import DataProto
from verl_lite.rollout.base import Rollout, TokenResult


def tool_tokenizer():
    tok = build_tokenizer()
    tok.chat_template = TOOL_CHAT_TEMPLATE
    return tok


def scripted_log_probs(trajectory: int, turn: int, n: int) -> list[float]:
    return [-(trajectory + 1) / 100 - turn / 10 - i / 1000 for i in range(n)]


class ScriptedRollout(Rollout):
    def __init__(self, tokenizer, scripts: list[list[str]]):
        super().__init__(seed=0, rank=0)
        self.tokenizer, self.scripts = tokenizer, scripts
        self.calls: list[list] = []  # the requests of each engine call
        self.preempted: dict[tuple, int] = {}  # request key -> the engine's num_preempted (else None)

    def generate_requests(self, requests, call):
        if not requests:
            return [], False
        self.calls.append(list(requests))
        results = []
        for r in requests:
            # (trajectory, request), or a round's continuation after `start` tokens (agent_loop/rounds.py)
            trajectory, count, *after = r.key
            start = after[0] if after else 0
            ids = self.tokenizer(self.scripts[trajectory][count - 1], add_special_tokens=False)["input_ids"]
            ids = ids[start:]
            stop = "eos" if len(ids) <= r.max_tokens else "length"
            ids = ids[: r.max_tokens]
            logps = scripted_log_probs(trajectory, count - 1, start + len(ids))[start:]
            results.append(TokenResult(ids, logps, stop, num_preempted=self.preempted.get(r.key)))
        return results, True

    def update_weights(self, named_tensors):
        raise AssertionError("a scripted rollout holds no weights")

    def update_adapter(self, tensors, config):
        raise AssertionError("a scripted rollout holds no weights")

    def generate_tokens(self, prompt_ids, prompt_mask, params):
        raise AssertionError("multi-turn rollouts go through generate_requests")


def prompt_batch(tokenizer, conversations: list[list[dict]], prompt_length: int, **fields) -> DataProto:
    """Left-padded prompts as the dataset builds them, with the rows' non-tensor fields."""
    ids = [
        tokenizer(
            tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False),
            add_special_tokens=False,
        )["input_ids"]
        for m in conversations
    ]
    input_ids = torch.full((len(ids), prompt_length), tokenizer.pad_token_id)
    mask = torch.zeros((len(ids), prompt_length), dtype=torch.long)
    for i, row in enumerate(ids):
        input_ids[i, prompt_length - len(row) :] = torch.tensor(row)
        mask[i, prompt_length - len(row) :] = 1
    return DataProto.from_dict(
        {"input_ids": input_ids, "attention_mask": mask}, {"raw_prompt": conversations, **fields}
    )

"""Trajectories into verl's batch layout, as the single-turn rollout lays its batch out:

prompts (bs, P) left-padded | responses (bs, R) right-padded
input_ids = [prompts | responses]; attention_mask 1 on every real token (inserted ones too);
position_ids = cumsum(attention_mask) - 1, so positions run on across turns as in generation;
response_mask (bs, R): 1 on the model's tokens only (0 on inserted tokens and padding);
rollout_log_probs (bs, R): the engine's log-probs of the model's tokens, 0 elsewhere;
rm_scores (bs, R): when every trajectory has a reward_score, on its last model token.
Each output is checked first (AgentLoopOutput.check: aligned lists, a finite reward_score), and a
batch in which no trajectory has a single token sampled by the policy is refused: every loss over
it would be 0/0. Every id must lie in the model's vocabulary [0, vocab_size): a loop's id beyond it
would reach the update as an index error deep in the actor, or as a wrong token.
"""

from __future__ import annotations

import torch

from verl_lite.agent_loop.base import AgentLoopOutput


def _last_model_token(mask: list[int]) -> int:
    ones = [i for i, m in enumerate(mask) if m]
    return ones[-1] if ones else max(len(mask) - 1, 0)


def _check_vocab(
    prompts: torch.Tensor,  # (bs, P) left-padded
    prompt_mask: torch.Tensor,  # (bs, P)
    responses: torch.Tensor,  # (bs, R) right-padded
    response_attention: torch.Tensor,  # (bs, R)
    vocab_size: int,
    wheres: list[str],
) -> None:
    """Every real id (padding aside) in [0, vocab_size), checked on the padded tensors at once; the
    first trajectory with one outside is located only when there is one."""
    bad_prompt = ((prompts >= vocab_size) | (prompts < 0)) & prompt_mask.bool()  # (bs, P)
    bad_response = ((responses >= vocab_size) | (responses < 0)) & response_attention.bool()  # (bs, R)
    bad_rows = bad_prompt.any(dim=1) | bad_response.any(dim=1)  # (bs,)
    if not bad_rows.any():
        return
    i = int(bad_rows.nonzero()[0])
    if bad_prompt[i].any():
        field, ids, bad, start = "prompt_ids", prompts[i], bad_prompt[i], int((prompt_mask[i] == 0).sum())
    else:
        field, ids, bad, start = "response_ids", responses[i], bad_response[i], 0
    col = int(bad.nonzero()[0])
    raise ValueError(
        f"{wheres[i]}: {field}[{col - start}]={int(ids[col])} is outside the model's vocabulary "
        f"[0, {vocab_size}) ({int(bad.sum())} such ids); a loop must return token ids of the model's tokenizer"
    )


def assemble_outputs(
    outputs: list[AgentLoopOutput],
    prompt_length: int,
    response_length: int,
    pad_id: int,
    names: list[str] | None = None,
    vocab_size: int | None = None,
) -> dict[str, torch.Tensor]:
    """`names`: each trajectory's agent loop, for the messages; `vocab_size`: the model's."""
    bs, P, R = len(outputs), prompt_length, response_length
    prompts = torch.full((bs, P), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((bs, P), dtype=torch.long)
    responses = torch.full((bs, R), pad_id, dtype=torch.long)
    response_attention = torch.zeros((bs, R), dtype=torch.long)
    response_mask = torch.zeros((bs, R), dtype=torch.long)
    log_probs = torch.zeros((bs, R), dtype=torch.float32)
    wheres = [f"agent loop output {i}" + (f" (agent loop {names[i]!r})" if names else "") for i in range(bs)]
    for i, out in enumerate(outputs):
        where = wheres[i]
        out.check(where)
        p, r = len(out.prompt_ids), len(out.response_ids)
        if p > P or r > R:
            raise ValueError(
                f"{where}: {p} prompt and {r} response ids exceed prompt_length={P} / response_length={R}"
            )
        prompts[i, P - p :] = torch.tensor(out.prompt_ids, dtype=torch.long)
        prompt_mask[i, P - p :] = 1
        responses[i, :r] = torch.tensor(out.response_ids, dtype=torch.long)
        response_attention[i, :r] = 1
        response_mask[i, :r] = torch.tensor(out.response_mask, dtype=torch.long)
        if out.response_logprobs is not None:
            log_probs[i, :r] = torch.tensor(out.response_logprobs, dtype=torch.float32)
    if vocab_size is not None:
        _check_vocab(prompts, prompt_mask, responses, response_attention, vocab_size, wheres)
    if outputs and not response_mask.any():
        loops = sorted(set(names)) if names else "the agent loops"
        raise ValueError(
            f"no trajectory of the batch ({bs}) has a token sampled by the policy (response_mask is 0 "
            f"everywhere; {loops}): the loss would have nothing to train on; a loop must return the "
            "tokens it generated with response_mask 1"
        )
    attention_mask = torch.cat([prompt_mask, response_attention], dim=-1)
    batch = {
        "prompts": prompts,
        "responses": responses,
        "response_mask": response_mask,
        "input_ids": torch.cat([prompts, responses], dim=-1),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
    }
    if all(out.response_logprobs is not None for out in outputs):
        batch["rollout_log_probs"] = log_probs * response_mask
    if outputs and all(out.reward_score is not None for out in outputs):
        scores = torch.zeros((bs, R), dtype=torch.float32)
        for i, out in enumerate(outputs):
            scores[i, _last_model_token(out.response_mask)] = float(out.reward_score)
        batch["rm_scores"] = scores
    return batch

"""`multi_turn.tokenization_sanity_check_mode`: does the trained token sequence equal what the chat
template gives for the whole conversation at once?

The loop builds a trajectory turn by turn (the model's tokens as sampled, inserted messages rendered
alone after the template's turn separator: data/chat_render.py), so the two can differ where the
model's text would tokenize differently, or where a template renders a turn differently in
context. The separator after the last turn (which ends the episode and is never sampled) is not a
difference. That never changes
what is trained (the sampled tokens are), but it shows how far training drifts from what the
template would produce in deployment. Modes, as verl's: `disable`; `strict` (any difference counts);
`ignore_strippable` (differences that are only whitespace do not count). Counted per trajectory;
the first difference of a rollout is logged.

The trajectory's prompt part is what the dataset rendered, with data.tool_config_path's schemas
(verl renders it in the loop, with the loop's). So the check compares the conversation rendered
whole with the prompt messages rendered as a generation prompt followed by the trajectory's
response tokens, both rendered with the same `tools`: a dataset that lists no tools
(data.tool_config_path=null) while the loop has some is no difference at the turn boundaries.
"""

from __future__ import annotations

import difflib


def first_mismatch(renderer, messages: list[dict], tools, response_ids: list[int], mode: str) -> str | None:
    """A description of the first counted difference between the prompt messages (those before the
    first assistant turn) rendered as a generation prompt plus `response_ids`, and the whole
    conversation rendered at once, or None."""
    if mode == "disable" or not messages:
        return None
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    ids = renderer.ids(messages[:first], add_generation_prompt=True, tools=tools) + list(response_ids)
    ids += renderer.separator_after(ids[-1] if ids else None)  # the last turn's: after the episode
    full = renderer.ids(messages, add_generation_prompt=False, tools=tools)
    if full == ids:
        return None
    decode = renderer.tokenizer.decode
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=full, b=ids, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        expected, got = decode(full[i1:i2]), decode(ids[j1:j2])
        if mode == "ignore_strippable" and not expected.strip() and not got.strip():
            continue
        return f"at token {j1}: the whole conversation renders {expected!r}, the trajectory holds {got!r}"
    return None

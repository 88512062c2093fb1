"""The chat template, applied only to what the loop inserts (tool results, user turns).

The model's own tokens are never rendered or re-encoded: the loop appends them as sampled. An
inserted message is rendered alone, with the generation prompt after it (so the model's next turn
starts where the template would start it), and the template's default system prompt (which many
templates, Qwen's among them, put before any conversation that lacks one) is cut off the front:
verl's agent loop does the same (`remove_system_prompt`). The system prompt is found as verl finds
it: what a one-message conversation has beyond one message of a two-message conversation.

The turn separator. A template may write tokens after a turn's closing token (Qwen's ChatML
writes `<|im_end|>\n`), but the model stops at the closing token, and a message rendered alone
does not start with the separator: without care, every turn boundary drops it and the trajectory
differs from the whole conversation rendered at once. verl restored it (verl-project/verl#6921,
July 2026; in 0.9.1 `QwenContinuousTokenBuilder._merge_context_token_ids` appends `\n` when the
ids so far end with `<|im_end|>`, mask 0). Here, as #6921's `initialize_turn_separator` finds it
for any template: the common tail of a user turn rendered empty and with text is [close token,
*separator]; the close token is the last EOS id in that tail (else its first token). `inserted`
puts the separator first when the trajectory so far ends with that close token (not after a turn
cut at the length budget, nor after a different stop token), so for Qwen templates it is 0.9.1's
rule token for token; for templates without a separator (Llama 3's `<|eot_id|>`) it is nothing.

`ids` renders a whole conversation at once (the tokenization sanity check, agent_loop/sanity.py);
the agent loop (agent_loop/) and warm starts on tool-call traces (tool_traces.py) use `inserted`.
"""

from __future__ import annotations

from typing import Any


class ChatRenderer:
    def __init__(self, tokenizer, chat_template_kwargs: dict[str, Any] | None = None):
        self.tokenizer = tokenizer
        self.kwargs = dict(chat_template_kwargs or {})
        self.system_prefix = self._system_prefix()
        self.turn_close, self.turn_separator = self._turn_separator()

    def ids(
        self, messages: list[dict], add_generation_prompt: bool, tools: list[dict] | None = None
    ) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False, **self.kwargs
        )
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _system_prefix(self) -> list[int]:
        user = {"role": "user", "content": ""}
        one, two = self.ids([user], False), self.ids([user, user], False)
        return one[: len(one) - (len(two) - len(one))]

    def _turn_separator(self) -> tuple[int | None, list[int]]:
        """(the turn's closing token, the separator the template writes after it), verl's probe."""
        empty = self.ids([{"role": "user", "content": ""}], False)
        filled = self.ids([{"role": "user", "content": "x"}], False)
        n = 0
        while n < min(len(empty), len(filled)) and empty[-1 - n] == filled[-1 - n]:
            n += 1
        tail = empty[len(empty) - n :]
        if not tail:
            return None, []
        eos = self.tokenizer.eos_token_id
        eos_ids = {eos} if isinstance(eos, int) else set(eos or [])
        close = max((i for i, t in enumerate(tail) if t in eos_ids), default=0)
        return tail[close], tail[close + 1 :]

    def inserted(self, messages: list[dict], after: int | None = None) -> list[int]:
        """Token ids of `messages` appended to a conversation whose last token is `after`, up to the
        model's next turn: the turn separator first when `after` is the template's closing token."""
        ids = self.ids(messages, add_generation_prompt=True)
        prefix = self.system_prefix
        ids = ids[len(prefix) :] if prefix and ids[: len(prefix)] == prefix else ids
        if after is not None and after == self.turn_close:
            return self.turn_separator + ids
        return ids

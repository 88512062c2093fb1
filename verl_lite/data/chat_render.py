"""The chat template, applied only to what the loop inserts (tool results, user turns).

The model's own tokens are never rendered or re-encoded: the loop appends them as sampled. An
inserted message is rendered alone, with the generation prompt after it (so the model's next turn
starts where the template would start it), and the template's default system prompt (which many
templates, Qwen's among them, put before any conversation that lacks one) is cut off the front:
verl's agent loop does the same (`remove_system_prompt`). The system prompt is found as verl finds
it: what a one-message conversation has beyond one message of a two-message conversation.

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

    def inserted(self, messages: list[dict]) -> list[int]:
        """Token ids of `messages` appended to a conversation, up to the model's next turn."""
        ids = self.ids(messages, add_generation_prompt=True)
        prefix = self.system_prefix
        return ids[len(prefix) :] if prefix and ids[: len(prefix)] == prefix else ids

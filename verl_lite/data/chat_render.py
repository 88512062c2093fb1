"""The chat template, applied only to what the loop inserts (tool results, user turns).

The model's own tokens are never rendered or re-encoded: the loop appends them as sampled. An
inserted message is rendered alone, with the generation prompt after it (so the model's next turn
starts where the template would start it), and the template's default system prompt (which many
templates, Qwen's among them, put before any conversation that lacks one) is cut off the front:
verl's agent loop does the same (`remove_system_prompt`). The system prompt is found as verl finds
it: what a one-message conversation has beyond one message of a two-message conversation.

Tool results go through `tool_results`: the template as above, except for the gpt-oss format
(OpenAI's harmony), whose template names a tool reply's sender from the assistant's call before it
and so cannot render a reply alone (gpt-oss's own template raises). There each reply is written as
verl writes it (GptOssContinuousTokenBuilder, picked there by model_type gpt_oss; here by that or
the format, which reads harmony: `is_harmony`): `<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>` + the
text as a JSON string + `<|end|>`, then the template's generation prompt (`<|start|>assistant`).

`appended` is verl's Continuous Token helper's rendering of messages a loop appends (tool replies and
other messages mixed; agent_loop/verl_helpers.py): `inserted`, or under harmony each run of replies
written as above and every other message alone, the generation prompt once at the end.

`ids` renders a whole conversation at once (the tokenization sanity check, agent_loop/sanity.py);
the agent loop (agent_loop/) and warm starts on tool-call traces (tool_traces.py) use `inserted`
and `tool_results`.
"""

from __future__ import annotations

import json
from typing import Any

HARMONY_FORMAT, HARMONY_MODEL_TYPE = "gpt-oss", "gpt_oss"  # the format and the model_type of harmony


def is_harmony(tool_format: str | None, hf_model_type: str | None = None) -> bool:
    """Whether tool replies are written in harmony: verl's rule (model_type gpt_oss) or the format."""
    return tool_format == HARMONY_FORMAT or hf_model_type == HARMONY_MODEL_TYPE


class ChatRenderer:
    def __init__(self, tokenizer, chat_template_kwargs: dict[str, Any] | None = None, harmony: bool = False):
        self.tokenizer = tokenizer
        self.kwargs = dict(chat_template_kwargs or {})
        self.system_prefix = self._system_prefix()
        self.harmony = harmony
        self.generation_prompt = self._generation_prompt() if self.harmony else []

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

    def tool_results(self, texts: list[str], names: list[str]) -> list[int]:
        """Token ids of the tool replies `texts` (to the calls named `names`, in order) appended to a
        conversation, up to the model's next turn (module docstring)."""
        if not self.harmony:
            return self.inserted([{"role": "tool", "content": t} for t in texts])
        replies = "".join(
            f"<|start|>functions.{name} to=assistant<|channel|>commentary<|message|>"
            f"{json.dumps(text, ensure_ascii=False, separators=(',', ':'))}<|end|>"
            for name, text in zip(names, texts, strict=True)
        )
        return self.tokenizer(replies, add_special_tokens=False)["input_ids"] + self.generation_prompt

    def appended(self, messages: list[dict], previous: list[dict] = ()) -> list[int]:
        """Token ids of `messages` (tool replies, user turns, ...) appended to the conversation
        `previous`, up to the model's next turn: `inserted`, except under harmony, where verl's
        Continuous Token builder for gpt-oss writes each run of tool messages itself (`tool_results`:
        the template cannot render a reply alone), renders every other message alone, and adds the
        generation prompt once, after the last. A reply's function is its message's `name`, else the
        call its `tool_call_id` names, else the call at its place in the latest assistant message's
        `tool_calls` (as verl resolves it)."""
        if not self.harmony or not any(m.get("role") == "tool" for m in messages):
            return self.inserted(messages)
        ids, start = [], 0
        for end in range(len(messages) + 1):
            in_run = end < len(messages) and messages[end].get("role") == "tool"
            if in_run:
                continue
            run = messages[start:end]
            if run:  # the replies to the calls of the latest assistant message before them
                names = tool_names(run, [*previous, *messages[:start]])
                ids += self.tool_results([str(m.get("content", "")) for m in run], names)
                ids = ids[: len(ids) - len(self.generation_prompt)]
            if end < len(messages):
                alone = self.inserted([messages[end]])
                ids += alone[: len(alone) - len(self.generation_prompt)]
            start = end + 1
        return ids + self.generation_prompt

    def _generation_prompt(self) -> list[int]:
        """What add_generation_prompt adds after a conversation, as verl derives it (a diff)."""
        user = [{"role": "user", "content": ""}]
        with_prompt, without = self.ids(user, True), self.ids(user, False)
        if with_prompt[: len(without)] != without:
            raise ValueError("the chat template's generation prompt is not a suffix of the conversation")
        return with_prompt[len(without) :]


def tool_names(replies: list[dict], previous: list[dict]) -> list[str]:
    """The function each tool message of `replies` answers (ChatRenderer.appended); ValueError names
    a reply none of the three rules resolves."""
    calls = next((m.get("tool_calls") or [] for m in reversed(previous) if m.get("role") == "assistant"), [])
    functions = [c.get("function", c) for c in calls]
    by_id = {str(c["id"]): f.get("name") for c, f in zip(calls, functions) if c.get("id") is not None}
    names = []
    for i, reply in enumerate(replies):
        name = reply.get("name") or by_id.get(str(reply.get("tool_call_id")))
        if not name and len(replies) == len(functions):
            name = functions[i].get("name")
        if not name:
            raise ValueError(
                f"tool message {i} of {len(replies)} names no function (no 'name', no 'tool_call_id' of a "
                f"call, and the latest assistant message has {len(functions)} tool_calls): harmony writes "
                "a reply's sender; give the message a 'name'"
            )
        names.append(str(name))
    return names

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
text as it is (not JSON-quoted: verl 0.9.0's format_gpt_oss_tool_response_manually and its
gpt-oss Continuous Token builder write the raw text) + `<|end|>`, then the template's generation prompt (`<|start|>assistant`).

`appended` is verl's Continuous Token helper's rendering of messages a loop appends (tool replies and
other messages mixed; agent_loop/verl_helpers.py): `inserted`, or under harmony each run of replies
written as above and every other message alone, the generation prompt once at the end.

The turn separator. A template may write tokens after a turn's closing token (Qwen's ChatML
writes `<|im_end|>\n`), but the model stops at the closing token, and a message rendered alone
does not start with the separator: without care, every turn boundary drops it and the trajectory
differs from the whole conversation rendered at once. verl restored it (verl-project/verl#6921,
July 2026; in 0.9.1 `QwenContinuousTokenBuilder._merge_context_token_ids` appends `\n` when the
ids so far end with `<|im_end|>`, mask 0). Here the separator is found for any template as #6921's
`initialize_turn_separator` finds it: the common tail of a user turn rendered empty and with text
is [close token, *separator]; the close token is the last EOS id in that tail (else its first
token). Whatever is inserted after ids ending with that close token (`after`) starts with the
separator; after a turn cut at the length budget or ended by another stop token (gpt-oss's
<|call|>) nothing is added. For Qwen templates that is 0.9.1's rule token for token; templates
without a separator (Llama 3's `<|eot_id|>`, gpt-oss's harmony) get nothing.

`ids` renders a whole conversation at once (the tokenization sanity check, agent_loop/sanity.py);
the agent loop (agent_loop/) and warm starts on tool-call traces (tool_traces.py) use `inserted`
and `tool_results`.
"""

from __future__ import annotations

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
        """(the turn's closing token, the separator the template writes after it): verl's probe."""
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

    def separator_after(self, last_id: int | None) -> list[int]:
        """The turn separator when the ids so far end with `last_id` = the closing token, else []."""
        return list(self.turn_separator) if last_id is not None and last_id == self.turn_close else []

    def inserted(self, messages: list[dict], after: int | None = None) -> list[int]:
        """Token ids of `messages` appended to a conversation whose last token is `after`, up to the
        model's next turn: the turn separator first when `after` is the closing token."""
        return self.separator_after(after) + self._alone(messages, add_generation_prompt=True)

    def _alone(self, messages: list[dict], add_generation_prompt: bool) -> list[int]:
        """`messages` rendered alone, the template's default system prompt cut off the front."""
        ids = self.ids(messages, add_generation_prompt=add_generation_prompt)
        prefix = self.system_prefix
        return ids[len(prefix) :] if prefix and ids[: len(prefix)] == prefix else ids

    def tool_results(self, texts: list[str], names: list[str], after: int | None = None) -> list[int]:
        """Token ids of the tool replies `texts` (to the calls named `names`, in order) appended to a
        conversation whose last token is `after`, up to the model's next turn (module docstring)."""
        if not self.harmony:
            return self.inserted([{"role": "tool", "content": t} for t in texts], after)
        return self.separator_after(after) + self._harmony_replies(texts, names) + self.generation_prompt

    def _harmony_replies(self, texts: list[str], names: list[str]) -> list[int]:
        """The replies as verl's gpt-oss builder writes them, without the generation prompt."""
        replies = "".join(
            f"<|start|>functions.{name} to=assistant<|channel|>commentary<|message|>{text}<|end|>"
            for name, text in zip(names, texts, strict=True)
        )
        return self.tokenizer(replies, add_special_tokens=False)["input_ids"]

    def appended(
        self, messages: list[dict], previous: list[dict] = (), after: int | None = None
    ) -> list[int]:
        """Token ids of `messages` (tool replies, user turns, ...) appended to the conversation
        `previous`, up to the model's next turn: `inserted`, except under harmony, where verl's
        Continuous Token builder for gpt-oss writes each run of tool messages itself (`tool_results`:
        the template cannot render a reply alone), renders every other message alone, and adds the
        generation prompt once, after the last. A reply's function is its message's `name`, else the
        call its `tool_call_id` names, else the call at its place in the latest assistant message's
        `tool_calls` (as verl resolves it). The turn separator first when `after` is the closing token."""
        if not self.harmony or not any(m.get("role") == "tool" for m in messages):
            return self.inserted(messages, after)
        ids, start = self.separator_after(after), 0
        for end in range(len(messages) + 1):
            in_run = end < len(messages) and messages[end].get("role") == "tool"
            if in_run:
                continue
            run = messages[start:end]
            if run:  # the replies to the calls of the latest assistant message before them
                names = tool_names(run, [*previous, *messages[:start]])
                ids += self._harmony_replies([str(m.get("content", "")) for m in run], names)
            if end < len(messages):
                ids += self._alone([messages[end]], add_generation_prompt=False)
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

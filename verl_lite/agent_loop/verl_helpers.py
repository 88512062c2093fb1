"""verl's AgentLoopBase helpers, for loops written against verl 0.9 (text models).

verl 0.9.0's loops build and extend a trajectory's tokens with its Continuous Token helpers
(`ct_build_initial_tokens`, `ct_merge_assistant_token`, `ct_merge_non_assistant_msg`) when
`self.enable_continuous_token` (data.continuous_token.enable: never here, base.py), else with
`apply_chat_template`, `system_prompt` and `turn_separator` (the path verl's loops take here). Both
are here with verl's signatures and results, rendered by the worker's one chat renderer
(data/chat_render.py), the same one the dataset's prompts and the built-in tool loop use:

  - the initial prompt is the conversation rendered whole with the generation prompt (and the tools'
    schemas), left-truncated to rollout.prompt_length with a warning, as verl does;
  - the model's tokens are appended as sampled (mask 1, their log-probs), never re-encoded;
  - appended messages (tool results, user turns) are rendered alone, as the built-in tool loop
    inserts them (ChatRenderer.inserted: the template's default system prompt cut off, the
    generation prompt after them), mask 0 and log-prob 0.0, after the template's turn separator
    when the ids so far end with its closing token (Qwen's `\n` after `<|im_end|>`: verl's
    QwenContinuousTokenBuilder; reported as `inserted_token_ids`, not counted as appended).

Multimodal inputs are refused by name (verl_lite trains text models; `processor` is None), so
`process_multi_modal_info` returns {} as verl's does without a processor.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)
TEXT_ONLY = "verl_lite trains text models only (no processor); remove the images, videos or audios"


@dataclass
class MergeResult:
    """verl's Continuous Token merge result: the token stream after the merge and what was appended."""

    token_ids: list[int]
    appended_token_count: int
    kind: str = "non_assistant"  # "assistant" | "non_assistant"
    inserted_token_ids: list[int] = field(default_factory=list)
    removed_prefix_token_count: int = 0


class VerlHelpers:
    """Mixed into AgentLoopBase (base.py): needs self.context, self.rollout_config, self.system_prompt."""

    def _render(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        return self.context.renderer.ids(list(messages), add_generation_prompt=True, tools=tools or None)

    def _assert_mm_supported(self, has_multi_modal: bool) -> None:
        if has_multi_modal:
            raise ValueError(f"multimodal inputs: {TEXT_ONLY}")

    def _get_mm_processor_kwargs(self, audio_data: list | None = None) -> dict[str, Any]:
        return dict(self.mm_processor_kwargs or {})

    async def process_vision_info(self, messages: list[dict]) -> dict:
        return await self.process_multi_modal_info(messages)

    async def process_multi_modal_info(self, messages: list[dict]) -> dict:
        """verl: {} without a processor (always, here)."""
        return {}

    @staticmethod
    def build_sglang_video_payload(videos, mm_inputs: dict[str, Any]):
        if videos:
            raise ValueError(f"videos: {TEXT_ONLY}")
        return None

    def _cap_text_prompt_length(self, prompt_ids: list[int]) -> list[int]:
        limit = self.rollout_config.prompt_length
        if len(prompt_ids) > limit:
            log.warning(
                "Prompt of %d tokens exceeds rollout.prompt_length=%d; left-truncating.",
                len(prompt_ids),
                limit,
            )
            return prompt_ids[-limit:]
        return prompt_ids

    async def ct_build_initial_tokens(
        self, messages, tools=None, images=None, videos=None, audios=None, mm_inputs_out=None
    ) -> list[int]:
        self._assert_mm_supported(bool(images or videos or audios))
        ids = await asyncio.get_running_loop().run_in_executor(None, self._render, messages, tools)
        return self._cap_text_prompt_length(ids)

    async def apply_chat_template(
        self,
        messages,
        tools=None,
        images=None,
        videos=None,
        audios=None,
        mm_processor_kwargs=None,
        remove_system_prompt: bool = False,
    ) -> list[int]:
        """verl 0.9.0's: the prompt ids of `messages` (with the generation prompt); without the
        template's default system prompt when `remove_system_prompt`."""
        self._assert_mm_supported(bool(images or videos or audios))
        ids = await asyncio.get_running_loop().run_in_executor(None, self._render, messages, tools)
        if remove_system_prompt:
            ids = ids[len(self.system_prompt) :]
        return self._cap_text_prompt_length(ids)

    async def ct_merge_assistant_token(
        self,
        runtime_token_ids,
        assistant_token_ids,
        response_mask,
        response_logprobs=None,
        assistant_logprobs=None,
    ):
        """(MergeResult, mask, log-probs): the sampled tokens appended, mask 1, their log-probs."""
        ids = list(assistant_token_ids)
        merged = MergeResult(list(runtime_token_ids) + ids, len(ids), "assistant")
        mask = list(response_mask) + [1] * len(ids)
        if response_logprobs is None:
            return merged, mask, None
        if assistant_logprobs is None and ids:
            raise ValueError("assistant_logprobs is required for assistant Continuous Token alignment")
        logprobs = list(assistant_logprobs or [])
        if len(logprobs) != len(ids):
            raise ValueError(
                "assistant_logprobs length must match appended assistant token count, "
                f"got {len(logprobs)} and {len(ids)}"
            )
        return merged, mask, list(response_logprobs) + logprobs

    async def ct_merge_non_assistant_msg(
        self,
        previous_messages,
        updated_messages,
        runtime_token_ids,
        response_mask,
        response_logprobs=None,
        tools=None,
    ):
        """(MergeResult, mask, log-probs): the messages appended to `previous_messages` rendered
        (ChatRenderer.appended: under gpt-oss's harmony, tool replies as verl's builder writes them),
        mask 0, log-prob 0.0."""
        previous, updated = list(previous_messages), list(updated_messages)
        if updated[: len(previous)] != previous:
            raise ValueError("Continuous Token messages must be append-only; prefix messages changed")
        appended = updated[len(previous) :]
        renderer, runtime = self.context.renderer, list(runtime_token_ids)
        ids = (
            await asyncio.get_running_loop().run_in_executor(None, renderer.appended, appended, previous)
            if appended
            else []
        )
        separator = renderer.separator_after(runtime[-1] if runtime else None) if appended else []
        merged = MergeResult(runtime + separator + ids, len(ids), "non_assistant", separator)
        ids = separator + ids
        mask = list(response_mask) + [0] * len(ids)
        logprobs = None if response_logprobs is None else list(response_logprobs) + [0.0] * len(ids)
        return merged, mask, logprobs

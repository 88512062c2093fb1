"""`tool_agent`: verl's ToolAgentLoop. The model generates; its tool calls are run and their results
inserted; with an interaction configured, a turn without tool calls gets the simulated user's
answer instead; until a limit ends the episode.

    generate (mask 1) --+-- response_length reached, max_assistant_turns or max_user_turns hit: end
                        +-- tool calls:  run them, insert the results (mask 0), generate again
                        +-- no call, an interaction: insert the user's answer (mask 0); its
                        |                "terminate" ends the episode, else generate again
                        +-- otherwise: end

Each generation's budget is what is left of response_length, so the whole response (model tokens
and inserted ones) never exceeds it; tool results that would not fit end the episode without being
inserted, as in verl, and a user turn is cut at the budget. The model's tokens are appended as
sampled (and decoded only to find tool calls and to give the interaction the conversation); the
inserted messages are rendered by the chat template alone, tool replies in gpt-oss's harmony layout
for that format, after the turn separator the template writes after the closing token the model
stopped at (data/chat_render.py, verl#6921). num_turns counts user and assistant turns plus one
(the prompt), as verl does.

The interaction's methods are a user's code: each call runs as a tool call does (on the worker's
tool loop, at most multi_turn.tool_call_timeout seconds, tool_calls.ToolRunner), and one that times out,
ends the process or raises fails the rollout naming the class and the method; its score must be a
finite number.

The rewards it collects go out in extra_fields under verl's names, for the reward function
(reward/extra_info.py): `turn_scores` (the interaction's score of each user turn), `tool_rewards`
(the step reward of each tool call, in order), and `reward_scores` (each used tool's `calc_reward`
by tool name, and `user_turn_rewards`: the turn scores again), the dict verl's multi-turn rollout
filled and its reward managers hand on as `rollout_reward_scores`. Each tool call gets verl's
AgentData (agent_data.py) as `agent_data`; what tools leave in its `extra_fields` joins the loop's.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from verl_lite.agent_loop.agent_data import AgentData
from verl_lite.agent_loop.base import AgentLoopBase, AgentLoopOutput, count_preempted
from verl_lite.agent_loop.tool_calls import ToolTimeout
from verl_lite.agent_loop.tool_parser import as_tool_call
from verl_lite.utils.scores import finite_score, short_repr
from verl_lite.utils.user_code import UserCodeExit


class Trajectory:
    """The response being built: ids, mask, rollout log-probs, within a budget."""

    def __init__(self, prompt_ids: list[int], budget: int):
        self.prompt_ids, self.budget = prompt_ids, budget
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.log_probs: list[float] = []

    @property
    def left(self) -> int:
        return self.budget - len(self.ids)

    @property
    def last_id(self) -> int | None:
        """The last token so far: the turn separator follows it when it is the closing token."""
        return (self.ids or self.prompt_ids or [None])[-1]

    def add_model(self, ids: list[int], log_probs: list[float]) -> None:
        self.ids += ids
        self.mask += [1] * len(ids)
        self.log_probs += log_probs

    def add_inserted(self, ids: list[int]) -> None:
        self.ids += ids
        self.mask += [0] * len(ids)
        self.log_probs += [0.0] * len(ids)


class ToolAgentLoop(AgentLoopBase):
    def __init__(self, *args, **kwargs):
        """verl 0.9.0's attributes (ToolAgentLoop.__init__), which run() reads, so a subclass may change
        them in its own __init__: the multi_turn limits, `tools` (name -> tool: the ones this loop's
        trajectories may call), `tool_parser`, the lengths. verl's hooks are not here: verl_hooks.py."""
        super().__init__(*args, **kwargs)
        mt = self.rollout_config.multi_turn
        self.max_user_turns, self.max_assistant_turns = mt.max_user_turns, mt.max_assistant_turns
        self.max_parallel_calls = mt.max_parallel_calls
        self.max_tool_response_length = mt.max_tool_response_length
        self.tool_response_truncate_side = mt.tool_response_truncate_side
        ctx = self.context
        self.tools = dict(ctx.tool_runner.tools) if ctx is not None else {}
        self.tool_schemas = list(ctx.tool_schemas or []) if ctx is not None else []
        self.tool_parser = ctx.parser if ctx is not None else None
        self.tool_parser_name = mt.format
        self.prompt_length = self.rollout_config.prompt_length
        self.response_length = self.rollout_config.response_length

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        ctx = self.context
        traj = Trajectory(list(kwargs["prompt_ids"]), self.response_length)
        messages = [dict(m) for m in (kwargs.get("raw_prompt") or [])]
        session = ctx.tool_runner.session(
            kwargs.get("tools_kwargs"),
            self.tools,
            (self.max_tool_response_length, self.tool_response_truncate_side),
        )
        agent_data = AgentData(messages, request_id=uuid4().hex, tools_kwargs=session.tools_kwargs)
        interaction, interaction_kwargs = await self._start_interaction(kwargs, agent_data.request_id)
        instance = agent_data.request_id  # verl's interactions key their state by the request id
        assistant_turns = user_turns = 0
        turn_scores: list[float] = []
        preempted = None  # verl's metrics["num_preempted"], summed over the generations
        try:
            while True:
                out = await self.server_manager.generate(
                    prompt_ids=traj.prompt_ids + traj.ids,
                    sampling_params={**sampling_params, "max_tokens": traj.left},
                )
                assistant_turns += 1
                preempted = count_preempted(preempted, out)
                traj.add_model(out.token_ids, out.log_probs)
                text = self.tokenizer.decode(
                    out.token_ids, skip_special_tokens=True
                )  # read, never re-encoded
                messages.append({"role": "assistant", "content": text})
                if traj.left <= 0 or _reached(self.max_assistant_turns, assistant_turns):
                    break
                if _reached(self.max_user_turns, user_turns):
                    break
                _, parsed = await self.tool_parser.extract_tool_calls(out.token_ids, ctx.tool_schema_models)
                calls = [as_tool_call(c) for c in parsed]
                if calls:
                    agent_data.update(
                        traj, out.token_ids, (assistant_turns, user_turns), parsed, turn_scores, session
                    )
                    texts = await session.run_turn(calls, self.max_parallel_calls, agent_data)
                    tool_messages = [{"role": "tool", "content": t} for t in texts]
                    ids = ctx.renderer.tool_results(
                        texts, [c.name for c in calls[: len(texts)]], traj.last_id
                    )
                    if len(ids) >= traj.left:  # verl: results that do not fit end the episode
                        break
                    messages += tool_messages
                    traj.add_inserted(ids)
                    user_turns += 1
                elif interaction is not None:
                    done, reply, score, _ = await self._interaction(
                        interaction, "generate_response", instance, messages, **interaction_kwargs
                    )
                    if score is not None and finite_score(score) is None:
                        raise ValueError(
                            f"interaction {_name(interaction)}.generate_response returned the score "
                            f"{short_repr(score)}; it must be a finite number (or None: no score), not a bool"
                        )
                    user_turns += 1
                    if score is not None:  # verl appends a turn's score only when there is one
                        turn_scores.append(finite_score(score))
                    messages.append({"role": "user", "content": reply})
                    traj.add_inserted(ctx.renderer.inserted([messages[-1]], traj.last_id)[: traj.left])
                    if done or traj.left <= 0:
                        break
                else:
                    break
        except BaseException:
            # the episode's own error is the one to tell: a finalize that fails too (after an
            # interaction that blocked the tool loop, it times out as well) must not replace it
            await session.finish()
            if interaction is not None:
                try:
                    await self._interaction(interaction, "finalize_interaction", instance)
                except Exception:
                    pass
            raise
        calc_rewards = await session.finish()
        if interaction is not None:
            await self._interaction(interaction, "finalize_interaction", instance)
        return AgentLoopOutput(
            prompt_ids=traj.prompt_ids,
            response_ids=traj.ids,
            response_mask=traj.mask,
            response_logprobs=traj.log_probs,
            num_turns=user_turns + assistant_turns + 1,
            metrics={**session.stats.as_dict(), "num_preempted": preempted},
            extra_fields={
                **agent_data.extra_fields,  # the tools' session data (verl returns agent_data.extra_fields)
                "turn_scores": turn_scores,
                "tool_rewards": session.tool_rewards,
                "reward_scores": {**calc_rewards, "user_turn_rewards": turn_scores},
                "messages": messages,
            },
        )

    async def _start_interaction(self, kwargs: dict, request_id: str):
        """The row's interaction (extra_info.interaction_kwargs.name) when an interaction config is set,
        started as verl's ToolAgentLoop started it (before verl#6074): start_interaction(request_id,
        **interaction_kwargs), its return value unused; later calls name the request id."""
        if not self.context.interactions:
            return None, {}
        interaction_kwargs = dict((kwargs.get("extra_info") or {}).get("interaction_kwargs") or {})
        name = interaction_kwargs.get("name")
        if name not in self.context.interactions:
            raise ValueError(
                f"extra_info.interaction_kwargs.name={name!r} names no interaction of "
                f"multi_turn.interaction_config_path (it has {sorted(self.context.interactions)})"
            )
        interaction = self.context.interactions[name]
        await self._interaction(interaction, "start_interaction", request_id, **interaction_kwargs)
        return interaction, interaction_kwargs

    async def _interaction(self, interaction, method: str, *args, **kwargs):
        """`await interaction.<method>(...)` as a tool call is run: on the tool loop, under tool_call_timeout."""
        runner = self.context.tool_runner
        what = f"interaction {_name(interaction)}.{method}"
        try:
            return await runner.call(getattr(interaction, method), *args, **kwargs)
        except ToolTimeout:
            raise RuntimeError(
                f"{what} did not return within {runner.timeout_s:g} s "
                "(actor_rollout_ref.rollout.multi_turn.tool_call_timeout)"
            ) from None
        except UserCodeExit as e:
            raise RuntimeError(f"{what}: {e}, which would end the worker") from None


def _reached(limit: int | None, count: int) -> bool:
    return bool(limit) and count >= limit


def _name(obj) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"

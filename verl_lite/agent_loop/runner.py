"""A worker's multi-turn rollout: its chunk of prompts through their agent loops, their generations
continuously batched (scheduler.py), into verl's batch layout.

Each prompt row becomes n trajectories (its samples, adjacent), each run by the loop its
`agent_name` names (rows without one: rollout.agent.default_agent_loop), every loop a task of one
event loop whose generations the ContinuousBatcher (scheduler.py) hands to the engine as they come.
Seeds derive from (rollout.seed, rank, the rollout call, trajectory, request), so a config gives the
same trajectories every run. The batch that comes back (assemble.py) carries, besides the tensors,
per trajectory: `__num_turns__` and `tool_call_counts` (verl's names), `agent_loop_stats` (tool
errors, timeouts, malformed and dropped calls, latencies, seconds generating and in tools, whether
the tokenization sanity check found a difference), which the driver turns into metrics
(metrics.py); and what the reward function reads (reward/extra_info.py), by verl's names:
`turn_scores` and `tool_rewards` ([] for a loop that sets none), `reward_scores` (a loop's
extra_fields["reward_scores"], verl's rollout reward scores; {} when none), and `tool_extra_fields`
(the rest of the loop's extra_fields, whole: a user loop's own fields reach the reward function too).

A loop is a user's code: one that ends the process (sys.exit) fails the rollout with a line naming
its class and file, and one that waits forever is ended by the batcher's loop_timeout
(scheduler.py), which names the loop and the call it waits in.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from verl_lite.agent_loop.assemble import assemble_outputs
from verl_lite.agent_loop.base import AgentLoopOutput
from verl_lite.agent_loop.checks import loop_timeout_s
from verl_lite.agent_loop.context import build_loop_context
from verl_lite.agent_loop.registry import agent_loops
from verl_lite.agent_loop.sanity import first_mismatch
from verl_lite.agent_loop.scheduler import ContinuousBatcher
from verl_lite.agent_loop.verl_args import build_loop, config_tree, loop_arguments
from verl_lite.protocol import DataProto
from verl_lite.rollout.base import Rollout, SamplingParams
from verl_lite.utils.user_code import exits_as_errors, file_of

log = logging.getLogger(__name__)
NOT_FOR_LOOPS = ("uid",)  # the driver's bookkeeping, not row data


class AgentLoopRunner:
    def __init__(
        self,
        rollout: Rollout,
        tokenizer,
        rollout_cfg,
        chat_template_kwargs: dict | None = None,
        vocab_size: int | None = None,
        trainer_config=None,
        hf_model_type: str | None = None,
        hold_s: float | None = None,
    ):
        """`vocab_size`: the model's (utils/hf_model.model_vocab_size; every returned id must be below
        it, and at least the tokenizer's length); None: the tokenizer's length. `trainer_config`: the
        whole config, which verl's loops read (self.config); None: the schema's defaults around
        `rollout_cfg` (verl_args.config_tree). `hold_s`: the batcher's (scheduler.py; None: its default
        rule, math.inf: the per-turn barrier)."""
        self.rollout, self.cfg = rollout, rollout_cfg
        self.vocab_size = max(vocab_size or 0, len(tokenizer))
        self.context = build_loop_context(rollout_cfg, tokenizer, chat_template_kwargs, hf_model_type)
        self.sanity_mode = rollout_cfg.multi_turn.tokenization_sanity_check_mode
        if self.context.renderer.harmony and self.sanity_mode != "disable":
            # harmony's markup is in the sampled tokens, not in the messages' text, and gpt-oss's
            # template cannot render a tool reply without the call's structured form: nothing to compare
            log.warning(
                "tokenization sanity check (%s): not run for gpt-oss's harmony format (the conversation "
                "cannot be rendered whole from its messages); multi_turn.tokenization_sanity_check_mode="
                "disable says so",
                self.sanity_mode,
            )
            self.sanity_mode = "disable"
        self.config_tree = config_tree(trainer_config, rollout_cfg, chat_template_kwargs)
        self.hf_model_type = hf_model_type
        self.loops = agent_loops(rollout_cfg.agent.agent_loop_config_path)
        self.pad_id = tokenizer.pad_token_id
        self.hold_s = hold_s

    def run(self, batch: DataProto, params: SamplingParams) -> DataProto:
        """`batch`: left-padded prompts (input_ids, attention_mask) and the rows' non-tensor fields."""
        call = self.rollout.next_call(params.validate)
        rows = self._trajectories(batch, params.n)
        outputs, batcher = run_bounded(self._run_all(rows, params, call))
        stats = self._stats(outputs, [batcher.generate_seconds[t] for t in range(len(outputs))])
        names = [row["agent_name"] for row in rows]
        batch = outputs_batch(outputs, stats, names, self.cfg, self.pad_id, self.vocab_size)
        batch.meta_info["metrics"] = {"agent_loop/engine_calls": batcher.num_engine_calls}
        return batch

    def _trajectories(self, batch: DataProto, n: int) -> list[dict]:
        """One dict of loop arguments per trajectory: the row's fields and its unpadded prompt ids."""
        ids, mask = batch.batch["input_ids"], batch.batch["attention_mask"].bool()
        default = self.cfg.agent.default_agent_loop
        rows = []
        for i in range(len(batch)):
            fields = {k: v[i] for k, v in batch.non_tensor_batch.items() if k not in NOT_FOR_LOOPS}
            fields["agent_name"] = fields.get("agent_name") or default
            fields["prompt_ids"] = ids[i][mask[i]].tolist()
            rows += [dict(fields) for _ in range(n)]
        return rows

    async def _run_all(
        self, rows: list[dict], params: SamplingParams, call
    ) -> tuple[list[AgentLoopOutput], ContinuousBatcher]:
        context_length = self.cfg.prompt_length + self.cfg.response_length
        tasks: list[asyncio.Task] = []
        batcher = ContinuousBatcher(
            lambda reqs: self.rollout.generate_requests(reqs, call),
            params,
            context_length,
            loop_timeout=loop_timeout_s(self.cfg),
            describe=lambda t: f"trajectory {t} ({self._loop_name(rows[t])}) waits in {waiting_in(tasks[t])}",
            hold_s=self.hold_s,
            exchange=self.rollout.gather_group if self.rollout.engine_group_size > 1 else None,
        )
        sampling = self.sampling(params)
        servers = [batcher.server(t) for t in range(len(rows))]  # all live before the first turn
        tasks += [
            asyncio.create_task(self._one(batcher, server, row, sampling))
            for server, row in zip(servers, rows)
        ]
        try:
            await batcher.drive()
            return list(await asyncio.gather(*tasks)), batcher
        finally:
            for task in tasks:
                task.cancel()

    @staticmethod
    def sampling(params: SamplingParams) -> dict:
        """The sampling_params a loop gets (verl's: the call's settings; a loop may override them)."""
        return {
            "temperature": 0.0 if params.greedy else params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k,
            "repetition_penalty": 1.0,
            "logprobs": True,
        }

    async def _one(self, batcher: ContinuousBatcher, server, row: dict, sampling: dict) -> AgentLoopOutput:
        try:
            spec = self.loops.get(row["agent_name"])
            if spec is None:
                raise ValueError(
                    f"agent_name={row['agent_name']!r} is not a registered agent loop; known: {sorted(self.loops)}"
                )
            cls = spec.load()
            with exits_as_errors(  # in a task, sys.exit() would end the worker with no word
                f"agent loop {row['agent_name']!r} ({cls.__module__}.{cls.__qualname__}, {file_of(cls)})",
                ends="the worker",
                fix="a loop must return its output or raise",
                error=RuntimeError,
            ):
                arguments = loop_arguments(self.config_tree, server, self.context)
                loop = build_loop(cls, arguments, spec.kwargs, self.context, self.hf_model_type)
                return await loop.run(dict(sampling), **row)
        finally:
            batcher.finished(server.trajectory)

    def _loop_name(self, row: dict) -> str:
        spec = self.loops.get(row["agent_name"])
        return f"agent loop {row['agent_name']!r}" + (f", {spec.target}" if spec is not None else "")

    def _stats(self, outputs: list[AgentLoopOutput], seconds: list[float]) -> list[dict]:
        """Per trajectory: the loop's counters, its engine seconds (`seconds`) and the sanity check's
        verdict."""
        mode, ctx = self.sanity_mode, self.context
        stats, first = [], None
        for t, out in enumerate(outputs):
            messages = out.extra_fields.pop("messages", None)  # the conversation, for this check only
            mismatch = None
            if messages is not None:
                mismatch = first_mismatch(ctx.renderer, messages, ctx.tool_schemas, out.response_ids, mode)
            first = first or mismatch
            stats.append(
                {
                    **out.metrics,
                    "generate_seconds": seconds[t],
                    # verl's: what the loop counted (count_preempted); -1 (not available) if it did not
                    "num_preempted": out.metrics.get("num_preempted", -1),
                    "tokenization_mismatch": bool(mismatch),
                }
            )
        if first is not None:
            log.warning(
                "tokenization sanity check (%s): a trajectory's tokens differ from its conversation rendered "
                "whole, %s (training uses the sampled tokens; see multi_turn.tokenization_sanity_check_mode)",
                mode,
                first,
            )
        return stats


def outputs_batch(
    outputs: list[AgentLoopOutput], stats: list[dict], names: list[str], rollout_cfg, pad_id: int, vocab_size
) -> DataProto:
    """The trajectories in verl's batch layout (assemble.py), with the per-trajectory fields the
    driver's metrics and the reward function read (module docstring)."""
    tensors = assemble_outputs(
        outputs, rollout_cfg.prompt_length, rollout_cfg.response_length, pad_id, names, vocab_size
    )
    non_tensors = {
        "__num_turns__": np.array([o.num_turns for o in outputs], dtype=np.int32),
        "tool_call_counts": np.array([o.metrics.get("num_tool_calls", 0) for o in outputs], dtype=np.int32),
        "agent_loop_stats": stats,
        **reward_fields(outputs),
    }
    return DataProto.from_dict(tensors, non_tensors)


def reward_fields(outputs: list[AgentLoopOutput]) -> dict[str, list]:
    """The per-trajectory columns the reward function's extra_info is built from (the loops'
    extra_fields, once `messages` is taken out for the sanity check)."""
    columns: dict[str, list] = {
        "turn_scores": [],
        "tool_rewards": [],
        "reward_scores": [],
        "tool_extra_fields": [],
    }
    for out in outputs:
        fields = {"turn_scores": [], "tool_rewards": [], **out.extra_fields}
        columns["reward_scores"].append(fields.pop("reward_scores", None) or {})
        columns["turn_scores"].append(fields["turn_scores"])
        columns["tool_rewards"].append(fields["tool_rewards"])
        columns["tool_extra_fields"].append(fields)
    return columns


def run_bounded(coro):
    """`asyncio.run(coro)`, except that threads a loop left running (`asyncio.to_thread`,
    `run_in_executor`) are not waited for: asyncio.run joins its default executor, so a loop stuck
    in a thread would hold the rollout past loop_timeout forever. Such a thread keeps running until
    it returns (the process waits for it at exit); the rollout has already failed with the line
    that names it."""
    loop = asyncio.new_event_loop()
    executor = ThreadPoolExecutor(thread_name_prefix="verl_lite-agent-loop")
    loop.set_default_executor(executor)
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:  # bounded: a task may catch its cancellation and await again
                loop.run_until_complete(asyncio.wait(pending, timeout=5))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            executor.shutdown(wait=False, cancel_futures=True)
            loop.close()


def waiting_in(task: asyncio.Task) -> str:
    """The innermost call a task's coroutine awaits, outside asyncio (e.g. `MyInteraction.generate_response
    (my_pkg/interaction.py:40)`), found by following the chain of awaits."""
    where, coro = "its own code", task.get_coro()
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None and os.sep + "asyncio" + os.sep not in frame.f_code.co_filename:
            code = frame.f_code
            where = f"{code.co_qualname} ({code.co_filename}:{frame.f_lineno})"
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return where

"""verl 0.9's colocate_async trainer mode: generation runs ahead of training on the same workers,
and a response cut off by a training step resumes after it, on the new weights.

With `trainer.use_v1=True trainer.v1.trainer_mode=colocate_async` the gen phase does what verl
0.9.1's PPOTrainerColocateAsync does, on verl_lite's hybrid workers:

  - before the first step, `colocate_async.num_warmup_batches` batches of prompts are submitted;
    every step submits its own batch (data.train_batch_size prompts) as it starts;
  - the workers generate every unfinished trajectory in rounds (`ROUNDS` per response length: a
    round gives each at most response_length / ROUNDS more tokens, in one engine call per rank,
    workers/actor_rollout_ref.generate_round); after each round the replay buffer
    (trainer/replay_buffer.py) evicts stale finished groups (refilling one prompt each) and the
    step takes its batch once train_batch_size groups are finished: the oldest submitted first;
  - what is still unfinished then stops where it is (verl aborts its requests) and continues in
    the next step's rounds from its tokens, under the weights that step's sync brings: a
    trajectory may span several model versions (`training/off_policy/trajectory_spans`).
A long response therefore never holds a step back: the step trains on the groups that finished,
the long one finishes later. The rest of the step (reward, old log-probs, advantages, updates) is
the sync step's, so rollout correction (algorithm.rollout_correction) applies to this off-policy
data as in verl, with the rollout's own log-probs of every token (`rollout_log_probs`).

Rows that name an agent loop run in the same rounds, their loops alive on the ranks between them
(agent_loop/rounds.py: a generation cut off by a round continues in the next, tool turns and all);
a finished trajectory comes back as its loop's output and the batch is assembled from those as the
sync rollout's is.

Rounds stand in for verl's abort: a round is one blocking engine call, so a step can stop only
between rounds (at most response_length / ROUNDS tokens past the moment its batch was complete).
The model version of a token is the number of actor updates before it was generated (the weights
of step s are version s - 1), so verl's staleness metrics read as in verl. Sampling seeds come from
each request's key and the rollout's call count (saved in checkpoints).
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import torch

from verl_lite.agent_loop.registry import SINGLE_TURN
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.data.rlhf_dataset import DATASET_INDEX, EpochSampler, RLHFDataset, agent_field
from verl_lite.errors import RunError
from verl_lite.protocol import DataProto
from verl_lite.rollout.base import assemble, folder_stop_ids, place_log_probs
from verl_lite.trainer.dynamic_sampling import kept_group_rows, sequence_metric
from verl_lite.trainer.replay_buffer import Group, ReplayBuffer, Trajectory
from verl_lite.trainer.rollout_inputs import loop_names, rollout_inputs

log = logging.getLogger(__name__)
ROUNDS = 8  # rounds per response length: how finely a step can cut generation off


def uses_agent_loops(dataset: RLHFDataset, default_loop: str) -> bool:
    """Whether a training row runs an agent loop (its agent_name, else rollout.agent.default_agent_loop)
    other than the single-turn one: the trajectories then run on the ranks' agent loops."""
    return any((agent_field(row, "agent_name") or default_loop) != SINGLE_TURN for row in dataset.rows)


class NotPlain(ValueError):
    """A value a checkpoint cannot keep (it loads with weights_only=True), at `path`."""


def plain(value, path: str):
    """`value` as the types a checkpoint loads with weights_only=True (numpy arrays and scalars as
    lists and numbers: a resumed run reads them so); anything else raises NotPlain naming its path."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v, f"{path}[{i}]") for i, v in enumerate(value))
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: plain(v, f"{path}.{k}") for k, v in value.items()}
    raise NotPlain(f"{path} holds a {type(value).__name__}")


def staleness_metrics(groups: list[Group], step: int) -> dict[str, float]:
    """verl 0.9.1's off-policy metrics of a batch trained at `step` (weights version step - 1)."""
    versions = np.array([t.versions for g in groups for t in g.trajectories if t.versions], dtype=float)
    if not len(versions):
        return {}
    spans = versions[:, 1] - versions[:, 0] + 1
    staleness = (step - 1) - versions[:, 1]  # the newest weights a trajectory used
    worst = (step - 1) - versions[:, 0]  # the oldest
    out = {}
    for name, values in (
        ("trajectory_spans", spans),
        ("trajectory_staleness", staleness),
        ("trajectory_staleness_worst", worst),
    ):
        for stat in ("mean", "max", "min"):
            out[f"training/off_policy/{name}/{stat}"] = float(getattr(values, stat)())
    return out


class ColocateAsync:
    """The gen phase of colocate_async: the replay buffer, the prompts it draws, the rounds."""

    mode = "colocate_async"  # the prefix of its own metrics

    def __init__(
        self, config: PPOTrainerConfig, workers, dataset: RLHFDataset, sampler: EpochSampler, tokenizer
    ):
        r, v1 = config.actor_rollout_ref.rollout, config.trainer.v1
        self.workers, self.dataset, self.sampler = workers, dataset, sampler
        self.batch_size, self.n, self.response_length = config.data.train_batch_size, r.n, r.response_length
        self.warmup_batches = v1.colocate_async.num_warmup_batches
        self.chunk = max(1, -(-r.response_length // ROUNDS))
        self.stop_at_eos = not r.ignore_eos
        self.pad_id = tokenizer.pad_token_id
        self.stop_ids = folder_stop_ids(tokenizer.eos_token_id, config.actor_rollout_ref.model.path)
        s = v1.sampler
        self.buffer = ReplayBuffer(r.n, s.max_off_policy_threshold, s.max_off_policy_strategy)
        self.drawn: list[int] = []  # prompts drawn from the sampler, not yet submitted (refills)
        self.started, self.next_key, self.submitted = False, 0, 0
        # agent loops (multi-turn): trajectories live on the ranks between rounds (agent_loop/rounds.py)
        self.rollout_cfg, self.default_loop = r, r.agent.default_agent_loop
        self.agent = uses_agent_loops(dataset, self.default_loop)
        self.round_method = "agent_round" if self.agent else "generate_round"
        self.live: dict[int, tuple[int, Trajectory]] = {}  # trajectory id -> (its rank, it)
        self.next_tid, self.vocab_size, self.engine_calls = 0, None, 0
        # DAPO (algorithm.filter_groups): finished groups scored as they finish, the ones without a
        # signal evicted and refilled (verl 0.9.1's async rule: evict k, refill k)
        fg = config.algorithm.filter_groups
        self.filter = fg if fg.enable else None
        self.with_responses = self.score = None  # the step's hooks (bind)
        self.warned_plain = False

    def bind(self, with_responses, score) -> None:
        """The step's own functions: `with_responses(prompts, gen)` -> the rows with their responses,
        `score(batch, metrics)` -> the reward function's extra info (scores into the batch)."""
        self.with_responses, self.score = with_responses, score

    # --- prompts ------------------------------------------------------------------------------------
    def _draw(self, count: int) -> list[int]:
        """`count` prompts from the training sampler, in its order (whole batches drawn as needed)."""
        while len(self.drawn) < count:
            self.drawn += self.sampler.next_batch()
        taken, self.drawn = self.drawn[:count], self.drawn[count:]
        return taken

    def _submit(self, indices: list[int], step: int) -> None:
        uids = [f"a{self.submitted + i}" for i in range(len(indices))]
        self.submitted += len(indices)
        self.buffer.add(uids, indices, [self.dataset.prompts[i] for i in indices], step)

    # --- the gen phase --------------------------------------------------------------------------------
    def generate(self, batch: DataProto, step: int, metrics: dict) -> DataProto:
        """This step's batch (`batch`: its new prompts) submitted, rounds until train_batch_size groups
        are finished; their rows with responses in verl's layout (with DAPO, scored)."""
        self._submit_step(batch, step)
        rounds, evicted, generate_s = 0, [], 0.0
        filtered, failed = [0], [0]
        while True:
            if (
                self._refill_stale(step, evicted)
                or self._refill_failed(step, failed)
                or self._refill_filtered(step, filtered)
            ):
                continue
            if self._batch_ready(step):
                break
            generate_s += self._round(self.buffer.unfinished(), version=step - 1, metrics=metrics)
            rounds += 1
        groups = self.buffer.take(self.batch_size)
        self._metrics(groups, evicted, step, metrics, filtered[0], failed[0])
        metrics.update(self._take_engine_calls())
        metrics["colocate_async/rounds"] = rounds
        metrics["timing_s/generate_local"] = generate_s
        return self._batch(groups, metrics)

    def _batch(self, groups: list[Group], metrics: dict) -> DataProto:
        """The taken groups' rows with their responses; with DAPO, the scores they were kept by."""
        if self.filter is None:
            return self.with_responses(*self._assembled(groups))
        extra: dict[str, list] = {}
        for g in groups:
            for key, values in g.scored[1].items():
                extra.setdefault(key, []).extend(values)
        for key, values in extra.items():
            if values and isinstance(values[0], (int, float)):
                metrics[f"reward_extra/{key}/mean"] = float(np.mean(values))
        return DataProto.concat([g.scored[0] for g in groups])

    def _refill_failed(self, step: int, failed: list[int]) -> bool:
        """verl 0.9.1's async rule for a failed session: a group whose agent loop raised in one of its
        trajectories is evicted once all of them ended, one new prompt submitted for it (`failed[0]`
        counts them; each error is logged in one line). A step that evicts twice train_batch_size of
        them stops the run with the last error: a loop that always fails would never fill a batch."""
        gone = [g for g in self.buffer.groups if g.failed]
        if not gone:
            return False
        for g in gone:
            error = next(t.failed for t in g.trajectories if t.failed)
            log.warning("%s: prompt %d's group evicted and refilled: %s", self.mode, g.index, error)
        self.buffer.remove(gone)
        failed[0] += len(gone)
        if failed[0] >= 2 * self.batch_size:
            raise RunError(
                f"{self.mode}: {failed[0]} groups' agent loops failed in step {step} (twice data."
                f"train_batch_size={self.batch_size}), the last: {error}; fix the loop (or its tools)"
            )
        self._submit(self._draw(len(gone)), step)
        return True

    def _refill_filtered(self, step: int, filtered: list[int]) -> bool:
        """DAPO: the finished groups not scored yet, scored; those whose algorithm.filter_groups.metric
        is equal across their responses evicted, one new prompt each (`filtered[0]` counts them).
        Whether any was evicted; a step that evicts max_num_gen_batches x train_batch_size is an error."""
        fresh = [g for g in self.buffer.groups if g.finished and g.scored is None] if self.filter else []
        if not fresh:
            return False
        batch = self.with_responses(*self._assembled(fresh))
        extra = self.score(batch, {})
        values = sequence_metric(batch, extra, self.filter.metric)
        kept_rows, _, _ = kept_group_rows(batch.non_tensor_batch["uid"], values)
        kept = {int(row) // self.n for row in kept_rows}
        dropped = [g for i, g in enumerate(fresh) if i not in kept]
        for i, g in enumerate(fresh):
            if i in kept:
                rows = slice(i * self.n, (i + 1) * self.n)
                mine = {k: v[rows] for k, v in extra.items() if len(v) == len(batch)}
                g.scored = (batch[list(range(rows.start, rows.stop))], mine)
        if not dropped:
            return False
        self.buffer.remove(dropped)
        filtered[0] += len(dropped)
        limit = self.filter.max_num_gen_batches
        if 0 < limit and filtered[0] >= limit * self.batch_size:
            raise RunError(
                f"algorithm.filter_groups under trainer.v1.trainer_mode={self.mode}: {filtered[0]} finished "
                f"groups evicted in step {step} (their {self.filter.metric} was equal across the group), "
                f"max_num_gen_batches={limit} x data.train_batch_size={self.batch_size}; raise algorithm."
                "filter_groups.max_num_gen_batches (0: no limit), or use prompts whose responses differ"
            )
        self._submit(self._draw(len(dropped)), step)
        return True

    def _submit_step(self, batch: DataProto, step: int) -> None:
        """The step's prompts into the buffer; before the first step, the warm-up batches (verl's
        on_train_begin)."""
        if not self.started:
            for _ in range(self.warmup_batches):
                self._submit(self._draw(self.batch_size), step)
            self.started = True
        self._submit([int(i) for i in batch.non_tensor_batch[DATASET_INDEX]], step)

    def _refill_stale(self, step: int, evicted: list[int]) -> bool:
        """`drop`'s eviction at `step` (the ages into `evicted`) and verl's refill: one new prompt per
        evicted group. Whether any was evicted."""
        stale = self.buffer.evict_stale(step)
        evicted += [g.age(step) for g in stale]
        if stale:
            self._submit(self._draw(len(stale)), step)
        return bool(stale)

    def _batch_ready(self, step: int) -> bool:
        """train_batch_size groups can be taken at `step`; a buffer that can never give them is an error."""
        if self.buffer.ready(step, self.batch_size):
            return True
        if not self.buffer.unfinished():
            raise RunError(
                f"{self.mode}: {sum(g.finished for g in self.buffer.groups)} finished groups in the replay "
                f"buffer and nothing left to generate, {self.batch_size} needed"
            )
        return False

    def _metrics(
        self, groups: list[Group], evicted: list[int], step: int, metrics: dict, filtered: int, failed: int
    ) -> None:
        """verl's off-policy metrics of the batch taken at `step` (`evicted`: the ages of the groups
        evicted meanwhile; `filtered`: DAPO's evictions; `failed`: failed groups'), and what is still
        in the buffer."""
        metrics.update(staleness_metrics(groups, step))
        if self.filter is not None:
            metrics["training/filter_groups/evicted_samples"] = filtered
        if self.agent:
            metrics["training/rollout_failure/evicted_samples"] = failed
        if evicted:
            ages = np.array(evicted, dtype=float)
            metrics["training/off_policy/evicted_samples"] = len(evicted)
            for stat in ("mean", "max", "min"):
                metrics[f"training/off_policy/evicted_samples_staleness/{stat}"] = float(
                    getattr(ages, stat)()
                )
        metrics[f"{self.mode}/groups_in_flight"] = len(self.buffer.groups)
        metrics[f"{self.mode}/partial_trajectories"] = sum(
            t.versions is not None for g in self.buffer.groups for t in g.trajectories if not t.done
        )

    def _round(self, unfinished, version: int, metrics: dict) -> float:
        """Every unfinished trajectory a few more tokens, spread over the ranks; the slowest rank's seconds."""
        group = self.workers.actor_rollout_wg
        per_rank, placed = self._plan_round(group.world_size, unfinished)
        out = getattr(group, self.round_method)(per_rank)
        self._apply_round(out, placed, version)
        for key, value in out[0]["metrics"].items():  # a weight sync and its check: the first round's
            if key != "timing_s/generate_local":
                metrics[key] = metrics.get(key, 0.0) + value
        return max(o["metrics"]["timing_s/generate_local"] for o in out)

    def _plan_round(self, world: int, unfinished) -> tuple[list, list]:
        """Each rank's requests (prompt + tokens so far, the tokens to generate at most, a new key) and
        where each trajectory's result comes back (rank, place); with agent loops, `_plan_agents`'."""
        if self.agent:
            return self._plan_agents(world, unfinished), []
        per_rank: list[list] = [[] for _ in range(world)]
        placed = []
        for k, (g, trajectory) in enumerate(unfinished):
            budget = min(self.chunk, self.response_length - len(trajectory.tokens))
            per_rank[k % world].append((g.prompt_ids + trajectory.tokens, budget, self.next_key))
            placed.append((k % world, len(per_rank[k % world]) - 1, trajectory))
            self.next_key += 1
        return per_rank, placed

    def _plan_agents(self, world: int, unfinished) -> list[tuple]:
        """Agent loops: each rank's new groups (whole, to the rank with the fewest live trajectories;
        rollout_inputs' layout) with their trajectories' ids, and the round's tokens per trajectory.
        Placed trajectories continue where they live."""
        load = [0] * world
        for rank, _ in self.live.values():
            load[rank] += 1
        new: list[list] = [[] for _ in range(world)]
        fresh = {id(g): g for g, t in unfinished if t.tid is None}  # whole groups, in order, once
        for g in fresh.values():
            rank = load.index(min(load))
            new[rank].append(g)
            load[rank] += len(g.trajectories)
            for t in g.trajectories:
                t.tid, self.next_tid = self.next_tid, self.next_tid + 1
                self.live[t.tid] = (rank, t)
        work = []
        for groups in new:
            if not groups:
                work.append((None, [], self.chunk))
                continue
            batch = self.dataset.collate([g.index for g in groups])
            prompts = rollout_inputs(batch, self.dataset, self.default_loop, agent_loops=True)
            work.append((prompts, [t.tid for g in groups for t in g.trajectories], self.chunk))
        return work

    def _apply_round(self, out: list[dict], placed: list, version: int) -> None:
        if self.agent:
            for answer in out:
                for tid in answer["progressed"]:
                    self.live[tid][1].progress(version)
                for tid, output, stats in answer["finished"]:
                    _, trajectory = self.live.pop(tid)
                    trajectory.result, trajectory.done = (output, stats), True
                for tid, error in answer["failed"]:
                    _, trajectory = self.live.pop(tid)
                    trajectory.failed, trajectory.done = error, True
                self.vocab_size = answer["vocab_size"]
            self.engine_calls += max(a["metrics"]["agent_loop/engine_calls"] for a in out)
            return
        for rank, i, trajectory in placed:
            tokens, log_probs, reason = out[rank]["results"][i]
            done = reason == "eos" or len(trajectory.tokens) + len(tokens) >= self.response_length
            trajectory.extend(list(tokens), list(log_probs), version, done)

    def _take_engine_calls(self) -> dict:
        """Agent loops: the engine calls of the rounds since the last batch (the busiest rank's each round)."""
        if not self.agent:
            return {}
        calls, self.engine_calls = self.engine_calls, 0
        return {"agent_loop/engine_calls": calls}

    def _assembled(self, groups: list[Group]) -> tuple[DataProto, DataProto]:
        prompts = self.dataset.collate([g.index for g in groups])
        prompts.non_tensor_batch["uid"] = np.array([g.uid for g in groups], dtype=object)
        if self.agent:
            from verl_lite.agent_loop.runner import outputs_batch

            trajectories = [t for g in groups for t in g.trajectories]
            names = [name for name in loop_names(prompts, self.default_loop) for _ in range(self.n)]
            gen = outputs_batch(
                [t.result[0] for t in trajectories],
                [t.result[1] for t in trajectories],
                names,
                self.rollout_cfg,
                self.pad_id,
                self.vocab_size,
            )
            return prompts, gen
        rows, width = len(groups) * self.n, self.response_length
        raw = torch.full((rows, width), self.pad_id, dtype=torch.long)
        raw_log_probs = torch.zeros((rows, width), dtype=torch.float32)
        for row, t in enumerate(t for g in groups for t in g.trajectories):
            raw[row, : len(t.tokens)] = torch.tensor(t.tokens, dtype=torch.long)
            raw_log_probs[row, : len(t.log_probs)] = torch.tensor(t.log_probs, dtype=torch.float32)
        b = prompts.batch
        out = assemble(
            b["input_ids"],
            b["attention_mask"],
            b["position_ids"],
            raw,
            self.n,
            width,
            eos_id=self.stop_ids,
            pad_id=self.pad_id,
            stop_at_eos=self.stop_at_eos,
        )
        out["rollout_log_probs"] = place_log_probs(raw_log_probs, out["response_mask"])
        return prompts, DataProto.from_dict(out)

    # --- checkpoints ----------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Finished groups whole (a loop's output as plain data), the others as their prompts. A group
        whose output holds what a checkpoint cannot keep (a loop's own object in extra_fields) is kept
        as its prompt, regenerated on resume, and said once."""
        buffer = self.buffer.state_dict()
        for g in buffer["groups"]:
            try:
                for t in g["trajectories"] or []:
                    if "result" in t:
                        output, stats = t["result"]
                        t["result"] = (plain(dataclasses.asdict(output), "output"), plain(stats, "stats"))
            except NotPlain as e:
                g["trajectories"] = None
                if not self.warned_plain:
                    self.warned_plain = True
                    log.warning(
                        "%s: a finished trajectory's agent loop %s, which a checkpoint cannot keep "
                        "(plain numbers, strings, lists and dicts only): its group is saved as its "
                        "prompt and generated again on resume",
                        self.mode,
                        e,
                    )
        return {
            "vocab_size": self.vocab_size,
            "buffer": buffer,
            "drawn": list(self.drawn),
            "started": self.started,
            "next_key": self.next_key,
            "submitted": self.submitted,
        }

    def load_state_dict(self, state: dict) -> None:
        from verl_lite.agent_loop.base import AgentLoopOutput

        self.buffer.load_state_dict(state["buffer"])
        self.vocab_size = state.get("vocab_size")
        for g in self.buffer.groups:
            for t in g.trajectories:
                if t.result is not None:
                    t.result = (AgentLoopOutput(**t.result[0]), t.result[1])
        self.drawn = [int(i) for i in state["drawn"]]
        self.started, self.next_key = bool(state["started"]), int(state["next_key"])
        self.submitted = int(state["submitted"])

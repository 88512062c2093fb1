"""verl 0.9's replay buffer of prompt groups for the V1 async trainers (trainer/colocate_async.py).

A group is one prompt and its rollout.n trajectories. It enters at the global step its prompt was
submitted (`submitted`) and leaves when it is trained on, or evicted. A trajectory keeps what it has
generated so far (tokens and their log-probs) and the model versions its tokens came from (version
v: the actor's weights as of the end of global step v), so one that is cut off when training begins resumes later,
on newer weights, where it stopped: verl's partial rollout.

The rules are verl 0.9.1's ReplayBufferAsync (trainer/ppo/v1/replay_buffer.py):
  - a finished group is sampleable; a batch takes the `batch_size` oldest by submission step;
  - `drop`: a finished group whose age at step s, s - submitted + 1, exceeds
    trainer.v1.sampler.max_off_policy_threshold is evicted, and the caller refills one prompt for it;
  - `wait`: nothing is evicted; instead a batch is not taken while an unfinished group has reached
    the threshold (s - submitted + 1 >= threshold), so it finishes and is trained on.
Its state (`state_dict`) is plain lists: a checkpoint keeps the finished groups as they are and the
prompts of the others, which are generated again from their start on resume (verl's recovery).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Trajectory:
    tokens: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    done: bool = False
    versions: tuple[int, int] | None = None  # (oldest, newest) model version of its tokens
    # a multi-turn trajectory (agent_loop/rounds.py): its id on the rank it lives on, and once
    # finished its loop's output and stats (the tokens above stay empty)
    tid: int | None = None
    result: tuple | None = None
    failed: str | None = None  # its agent loop raised: the error, in one line (verl: a failed session)

    def extend(self, tokens: list[int], log_probs: list[float], version: int, done: bool) -> None:
        self.tokens += tokens
        self.log_probs += log_probs
        self.done = done
        if tokens:
            self.progress(version)

    def progress(self, version: int) -> None:
        """It got tokens from the weights of `version`."""
        low, high = self.versions or (version, version)
        self.versions = (min(low, version), max(high, version))


@dataclass
class Group:
    uid: str
    index: int  # the prompt's row in the training set
    submitted: int  # the global step its prompt was submitted at
    prompt_ids: list[int]
    trajectories: list[Trajectory]
    # DAPO under the async modes: once finished and kept, its rows with responses and scores and the
    # reward function's extra info (not checkpointed: a resumed run scores its finished groups again)
    scored: tuple | None = None

    @property
    def finished(self) -> bool:
        """Every trajectory done and none failed: sampleable."""
        return all(t.done and t.failed is None for t in self.trajectories)

    @property
    def failed(self) -> bool:
        """Every trajectory done, and one's agent loop raised: the group is evicted and refilled."""
        return all(t.done for t in self.trajectories) and any(t.failed for t in self.trajectories)

    def age(self, step: int) -> int:
        """verl's span from submission to training at `step` (1: trained at the step it was submitted)."""
        return step - self.submitted + 1


class ReplayBuffer:
    def __init__(self, n: int, threshold: int, strategy: str):
        self.n, self.threshold, self.strategy = n, threshold, strategy
        self.groups: list[Group] = []  # in submission order

    def add(self, uids: list[str], indices: list[int], prompt_ids: list[list[int]], step: int) -> None:
        for uid, index, ids in zip(uids, indices, prompt_ids, strict=True):
            trajectories = [Trajectory() for _ in range(self.n)]
            self.groups.append(Group(uid, int(index), step, list(ids), trajectories))

    def unfinished(self) -> list[tuple[Group, Trajectory]]:
        return [(g, t) for g in self.groups for t in g.trajectories if not t.done]

    def evict_stale(self, step: int) -> list[Group]:
        """`drop`: the finished groups too old to train at `step`, removed (the caller refills one
        prompt for each); nothing under `wait`."""
        if self.strategy != "drop":
            return []
        stale = [g for g in self.groups if g.finished and g.age(step) > self.threshold]
        self.groups = [g for g in self.groups if not (g.finished and g.age(step) > self.threshold)]
        return stale

    def remove(self, groups: list[Group]) -> None:
        """Groups out: DAPO's without a learning signal, failed ones (the caller refills one prompt each)."""
        gone = {id(g) for g in groups}
        self.groups = [g for g in self.groups if id(g) not in gone]

    def ready(self, step: int, batch_size: int) -> bool:
        """A batch can be taken: `batch_size` groups are finished and, under `wait`, no unfinished
        group has reached the threshold."""
        if self.strategy == "wait" and any(
            not g.finished and g.age(step) >= self.threshold for g in self.groups
        ):
            return False
        return sum(g.finished for g in self.groups) >= batch_size

    def take(self, batch_size: int) -> list[Group]:
        """The `batch_size` finished groups submitted first (ties: in submission order), removed."""
        finished = [g for g in self.groups if g.finished]
        chosen = sorted(finished, key=lambda g: g.submitted)[:batch_size]
        taken = {id(g) for g in chosen}
        self.groups = [g for g in self.groups if id(g) not in taken]
        return chosen

    def state_dict(self) -> dict:
        """Finished groups whole; the others as their prompts (regenerated from the start on resume)."""
        return {
            "groups": [
                {
                    "uid": g.uid,
                    "index": g.index,
                    "submitted": g.submitted,
                    "prompt_ids": g.prompt_ids,
                    "trajectories": [
                        {
                            "tokens": t.tokens,
                            "log_probs": t.log_probs,
                            "versions": list(t.versions or ()),
                            **({"result": t.result} if t.result is not None else {}),
                        }
                        for t in g.trajectories
                    ]
                    if g.finished
                    else None,
                }
                for g in self.groups
            ]
        }

    def load_state_dict(self, state: dict) -> None:
        self.groups = []
        for g in state["groups"]:
            saved = g["trajectories"]
            trajectories = (
                [
                    Trajectory(
                        list(t["tokens"]),
                        list(t["log_probs"]),
                        True,
                        tuple(t["versions"]) or None,
                        result=t.get("result"),
                    )
                    for t in saved
                ]
                if saved is not None
                else [Trajectory() for _ in range(self.n)]
            )
            self.groups.append(
                Group(g["uid"], g["index"], g["submitted"], list(g["prompt_ids"]), trajectories)
            )

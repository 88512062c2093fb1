"""The next step's rollout, queued on the workers right behind this step's actor update.

A GRPO step ends with update_actor and the next begins with generate_sequences, on the same workers,
with nothing in between that the workers see (the driver logs, and draws and collates the next
prompts). So when this step ends in no validation and no checkpoint, the driver submits the next
step's generate_sequences right after update_actor, before it waits for the update: each worker
runs the two calls back to back (Ray runs one caller's calls to an actor in submission order), and
the driver's wait for the update's result, its metrics and logging, and the next call's dispatch
overlap the worker's work instead of standing between the two. Every worker runs the same calls in
the same order with the same data as without it, so the training is the same (the rollout's seeds
come from its own call counters); only when the rollout waits changes (`timing_s/gen` of a step
whose rollout was queued early is the driver's remaining wait for it, the worker's own time is
`timing_s/generate_local`).

Not queued early: after the last step, before a validation or a checkpoint (the checkpoint keeps
the rollout's and the sampler's state after this step; validation must see the workers as they
are after this step's update), while the actor does not update (critic_warmup), and with DAPO's
dynamic sampling (the next step's generation depends on how many groups this one keeps).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from verl_lite.data.rlhf_dataset import EpochSampler
from verl_lite.protocol import DataProto
from verl_lite.single_controller.ray_group import PendingCall


def peek_next_indices(sampler: EpochSampler) -> list[int]:
    """The indices the training loop's next batch will have, without moving the sampler (the next
    one of this epoch, else the first of the next)."""
    return copy.copy(sampler).next_batch()


@dataclass
class QueuedRollout:
    indices: list[int]
    batch: DataProto  # the collated prompts of that step, handed to its train_step
    call: PendingCall  # its generate_sequences, queued behind the update

    def batch_for(self, indices: list[int]) -> DataProto:
        if indices != self.indices:
            raise RuntimeError(
                f"the rollout queued for the next step has prompts {self.indices[:4]}..., but the step drew "
                f"{indices[:4]}...: the sampler moved between the two"
            )
        return self.batch

    def result_for(self, batch: DataProto) -> DataProto:
        if batch is not self.batch:
            raise RuntimeError("the rollout queued for this step was for another batch of prompts")
        return self.call.result()

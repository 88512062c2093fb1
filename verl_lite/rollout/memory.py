"""Each rollout backend's memory model: what its engine holds on a device in each phase of a step.

A backend declares its model when it is registered (`Backend.memory` in rollout/__init__.py); the
planner (planner/phases.py) asks the backend the run names, so a new backend brings its own model
instead of inheriting another's. A model takes the planner's request (planner/request.py: the
config, the actor's model shape, the world, the device's bytes, GPU or CPU) and returns a
`RolloutMemory`:

  vLLM on a GPU   its gpu_memory_utilization share of the device (weights + KV cache + workspace,
                  claimed at start and on every wake) while it generates; while it receives weights
                  only its weights (the KV cache still sleeps) plus the sync's gather buffer (up to
                  update_weights_bucket_megabytes of full tensors, plus the tensor that overflows
                  it, plus with LoRA's lora.merge two float32 buffers of the largest weight, where
                  the merge is built, and a bucket of merged tensors); between rollouts nothing with free_cache_engine (sleep level 2), else its share
  vLLM on CPU     its weights and rollout.cpu_kv_cache_gb, always (no sleep mode)
  HF generate     a full copy of the weights, always, plus the KV cache of the rank's prompts x n at
                  full length and one step's logits while it generates (under the async modes, of
                  every batch in flight: Request.in_flight_batches)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from verl_lite.engine.lora_spec import LoraSpec
from verl_lite.engine.model_shape import DTYPE_BYTES

if TYPE_CHECKING:
    from verl_lite.planner.request import Request

GB = 1024**3
MB = 1024**2


@dataclass
class RolloutMemory:
    generate: int  # on the device while generating
    sync: int  # while receiving the actor's weights
    idle: int  # between rollouts (log-probs, updates)


def _largest_gathered(req: Request) -> int:
    """One full tensor of the actor's gather, in its model_dtype (what a weight sync holds at once)."""
    p = DTYPE_BYTES[req.cfg.actor_rollout_ref.actor.fsdp_config.model_dtype]
    return max(n for _, n in req.shape.all_tensors()) * p


def _merge_buffers(req: Request, rebucketed: bool) -> int:
    """LoRA with model.lora.merge: a sync merges each adapted weight in float32 (engine/lora.
    merged_weight: W + scale * B A built in one buffer of W's size, each rank-term in another), on
    the actor's device, beside the gathered tensors; `rebucketed` (vLLM): the merged tensors, new
    ones, are collected up to update_weights_bucket_megabytes before the engine loads them, beside
    the gather's bucket they came from. Nothing without merge."""
    spec = LoraSpec.of(req.cfg.actor_rollout_ref.model)
    if spec is None or not spec.merge:
        return 0
    largest = max(n for _, n in req.shape.layer_tensors())  # an adapted weight: a decoder layer's linear
    bucket = int(req.cfg.actor_rollout_ref.rollout.update_weights_bucket_megabytes * MB) if rebucketed else 0
    return 2 * largest * DTYPE_BYTES["fp32"] + bucket


def vllm_memory(req: Request) -> RolloutMemory:
    r = req.cfg.actor_rollout_ref.rollout
    weights = -(-req.shape.num_params // r.tensor_model_parallel_size) * DTYPE_BYTES[r.dtype]
    buffer = int(r.update_weights_bucket_megabytes * MB) + _largest_gathered(req) + _merge_buffers(req, True)
    if not req.accelerator:
        held = weights + int(r.cpu_kv_cache_gb * GB)
        return RolloutMemory(generate=held, sync=held + buffer, idle=held)
    share = int(r.gpu_memory_utilization * req.device_bytes)
    asleep = r.free_cache_engine
    return RolloutMemory(
        generate=share, sync=(weights if asleep else share) + buffer, idle=0 if asleep else share
    )


def hf_memory(req: Request) -> RolloutMemory:
    cfg, shape = req.cfg, req.shape
    r = cfg.actor_rollout_ref.rollout
    w = DTYPE_BYTES[r.dtype]
    weights = shape.num_params * w
    sequences = max(1, cfg.data.train_batch_size * r.n * req.in_flight_batches // req.world)
    seq_len = r.prompt_length + r.response_length
    kv_cache = 2 * shape.layers * shape.kv_dim * sequences * seq_len * w
    return RolloutMemory(
        generate=weights + kv_cache + sequences * shape.vocab * 4,
        sync=weights + _largest_gathered(req) + _merge_buffers(req, False),
        idle=weights,
    )


def outbox_memory(req: Request) -> RolloutMemory:
    """separate_async's trainer devices (trainer/separate_async.py): no rollout; a sync gathers the
    full weights a bucket at a time on the device and copies them to the host (rollout/weight_sync.Outbox)."""
    bucket = int(req.cfg.actor_rollout_ref.rollout.update_weights_bucket_megabytes * MB)
    return RolloutMemory(
        generate=0, sync=bucket + _largest_gathered(req) + _merge_buffers(req, False), idle=0
    )

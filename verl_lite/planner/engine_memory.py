"""Memory of one FSDP2 engine on one rank, estimated from the model's shape: the planner's math.

Pure arithmetic on a `ModelShape` (model_shape.py, read from a HF config.json) and an `EngineSetup`
(engine_setup.py: world size, dtypes, micro-batch, sequence length, offload mode, levers, LoRA). No
torch: the planner (phases.py), the trainer's auto-offload and scripts/gpu_check.py use it;
tests/planner/test_engine_memory.py checks every term against a hand calculation. This module holds
the engine's state and FSDP2 working set and composes the peaks; activations and no-grad forwards
are activations.py's, host bytes host.py's. N is the parameter count, W the ranks
sharing the model, p/c/r the bytes of the weights' storage dtype (model_dtype; a frozen engine's is
its param_dtype: model_shape.storage_dtype) / param_dtype / reduce_dtype, a "unit" what one
fully_shard owns (a decoder layer, or the root: embeddings, head, final norm), S(x) a unit's shard
(dim 0 split W ways, padded). What each term is, read from torch 2.13's FSDP2 and AdamW:

  params        the master shard, S(N) * p. offload_policy: on the host. Manual param_offload: on the
                host between phases, on the device inside them.
  grads         the reduced shard, S(N) * p (FSDP2 casts the reduce output to the params' dtype);
                on the host with offload_policy. Plus, when reduce-scatter waits for the last
                micro-batch, every unsharded grad accumulated in reduce_dtype (FSDP2 upcasts it
                before accumulating): N * r, on the device in every mode.
  optimizer     AdamW's exp_avg and exp_avg_sq, 2 * S(N) * p. optimizer_offload streams them through
                the device a unit at a time, the next unit's arriving while one steps and the last
                one's leaving (engine/offload.step_schedule): 2 * p * the largest sum of three
                consecutive units' shards in step order (the layers, then the root). offload_policy:
                on the host.
  step_temp     foreach AdamW's sqrt(exp_avg_sq) temporary, one more S(N) * p during the step (the
                step's peak is params + grads + both moments + this: 5x the shard in fp32);
                streamed: S(largest unit) * p. offload_policy steps on the host tensor by tensor.
  gathered      full params of the root (kept through forward and backward), of the layer
                computing and the one prefetched, in param_dtype; without reshard_after_forward
                every unit stays gathered. Plus the all-gather input: the largest unit's shard cast
                to param_dtype, and with offload_policy each tensor's shard copied from the host in
                model_dtype before its cast (one tensor at a time: the largest).
  root_grads    in backward, the root's unsharded grads in param_dtype (the LM head's is computed
                first and reduced last, with the root)
  reduce        a unit's reduce-scatter: its input in reduce_dtype (the unit's full size; FSDP2
                keeps one in flight) beside first the unit's grads (param_dtype, freed once copied
                in), then the output shard in reduce_dtype
  activations, forward, attention_mask   activations.py (with the memory levers of issue 13:
                sp_size, fused log-probs, entropy chunking, activation offload)
  fsdp_size     HSDP: the model is sharded over fsdp_size ranks, not the world; the caller
                (role_engines.py) passes that as `world`.

The update's peak is the larger of backward's (state + gathered + the larger of: activations with
the root's grads and a layer's reduce; the root's reduce at the end of backward) and the step's
(state + step_temp). Host bytes: what the mode keeps there (host.py) and offloaded
activations during the update.

With LoRA (engine_setup.parts) the units hold frozen base weights and trained tensors: params count
both, while grads, grad_accum, optimizer, step_temp, root_grads, the reduce-scatter buffers and the
host's grads and moments count only the trained ones (FSDP2 reduce-scatters only parameters with
gradients). The CUDA context, NCCL buffers and allocator fragmentation are not modelled here
(phases.py adds a per-process overhead; the planner keeps a headroom; scripts/gpu_check.py
measures).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl_lite.engine.model_shape import ModelShape, dtype_bytes, shard_numel
from verl_lite.planner.activations import activation_terms, forward_bytes
from verl_lite.planner.engine_setup import MODES, EngineSetup, Parts, parts
from verl_lite.planner.host import host_terms


@dataclass
class EngineEstimate:
    """Bytes of one engine on one rank: on the device between phases (`resident`), at the peak of
    its training step (`update`, 0 when frozen) and of a no-grad forward (`forward`), and in host
    memory (`host`, steady; `host_load`, while loading before sharding). `terms`: every named term."""

    resident: int
    update: int
    forward: int
    host: int
    host_load: int
    terms: dict[str, int] = field(default_factory=dict)


def _units(pt: Parts, world: int) -> dict[str, int]:
    """Shard numels: the whole model, a layer, the root, the largest unit, the largest tensor, and the
    same of the trained tensors (`trained`, `trained_layer`, `trained_root`, `trained_largest`)."""
    layers = pt.layer_frozen + pt.layer_trained
    roots = pt.root_frozen + pt.root_trained
    layer, root = shard_numel(layers, world), shard_numel(roots, world)
    t_layer, t_root = shard_numel(pt.layer_trained, world), shard_numel(pt.root_trained, world)
    return {
        "layer": layer,
        "root": root,
        "largest": max(layer, root),
        "tensor": max(shard_numel([t], world) for t in layers + roots),
        "trained_layer": t_layer,
        "trained_root": t_root,
        "trained_largest": max(t_layer, t_root),
    }


def _state_terms(shape: ModelShape, s: EngineSetup) -> dict[str, int]:
    """params, grads, grad_accum, optimizer, step_temp on the device during the update, and what stays
    between phases (resident)."""
    p, r = dtype_bytes(s.storage_dtype), dtype_bytes(s.reduce_dtype)
    pt = parts(shape, s)
    u, b = _units(pt, s.world), pt.trained_bytes
    frozen = shard_numel(pt.layer_frozen, s.world) * shape.layers + shard_numel(pt.root_frozen, s.world)
    trained = u["trained_layer"] * shape.layers + u["trained_root"]
    n_trained = shape.layers * pt.full("layer_trained") + pt.full("root_trained")
    accum = n_trained * r if not s.reduce_every_micro else 0
    if s.mode == "offload_policy":
        return dict(params=0, grads=0, grad_accum=accum, optimizer=0, step_temp=0, resident=0)
    params, grads = frozen * p + trained * b, trained * b
    if s.mode == "param_optimizer_offload":
        unit = u["trained_largest"] * b
        order = [u["trained_layer"]] * shape.layers + [u["trained_root"]]  # offload.step_schedule's
        in_flight = max(sum(order[i : i + 3]) for i in range(max(1, len(order) - 2))) * b
        return dict(
            params=params, grads=grads, grad_accum=accum, optimizer=2 * in_flight, step_temp=unit, resident=0
        )
    return dict(
        params=params,
        grads=grads,
        grad_accum=accum,
        optimizer=2 * grads,
        step_temp=grads,
        resident=params + 2 * grads,
    )


def _transient_terms(shape: ModelShape, s: EngineSetup) -> dict[str, int]:
    """gathered (+ all-gather input), unsharded grads, reduce-scatter buffers: the FSDP2 working set."""
    p, c, r = dtype_bytes(s.storage_dtype), dtype_bytes(s.param_dtype), dtype_bytes(s.reduce_dtype)
    pt = parts(shape, s)
    u = _units(pt, s.world)
    layer, root = pt.full("layer"), pt.full("root")
    full = shape.layers * layer + root if not s.reshard_after_forward else root + 2 * layer
    ag_input = u["largest"] * c if c != p or s.mode == "offload_policy" else 0
    copy_in = u["tensor"] * p if s.mode == "offload_policy" else 0

    def reduce(full_numel: int, shard: int) -> int:
        return full_numel * r + max(full_numel * c, shard * r) if full_numel else 0

    return {
        "gathered": full * c + ag_input + copy_in,
        "root_grads": pt.full("root_trained") * c,
        "reduce_layer": reduce(pt.full("layer_trained"), u["trained_layer"]),
        "reduce_root": reduce(pt.full("root_trained"), u["trained_root"]),
    }


def estimate(shape: ModelShape, s: EngineSetup) -> EngineEstimate:
    if s.mode not in MODES:
        raise ValueError(f"offload mode {s.mode!r} is not one of {MODES}")
    state, work = _state_terms(shape, s), _transient_terms(shape, s)
    training = s.trains and (s.micro or s.tokens_per_micro)
    act = activation_terms(shape, s) if training else {"activations": 0, "host_activations": 0}
    acts = act["activations"]
    fwd = forward_bytes(shape, s) if s.forward_micro or s.forward_tokens else 0
    held = state["params"] + state["grads"] + state["grad_accum"] + state["optimizer"]
    in_layers = acts + work["root_grads"] + work["reduce_layer"]
    at_root = work["reduce_root"]  # the end of backward: activations are gone
    backward = held + work["gathered"] + max(in_layers, at_root)
    step = held + state["step_temp"]
    # a no-grad forward: the resident state, plus the params manual offload brings in for the phase
    in_phase = max(state["resident"], state["params"])
    host = {**host_terms(shape, s), "host_activations": act["host_activations"]}
    terms = {**state, **work, "activations": acts, "forward_activations": fwd, **host}
    return EngineEstimate(
        resident=state["resident"],
        update=max(backward, step) if s.trains else 0,
        forward=in_phase + work["gathered"] + fwd,
        host=host["host_params"] + host["host_grads"] + host["host_optimizer"] + host["host_activations"],
        host_load=host["host_load"],
        terms=terms,
    )

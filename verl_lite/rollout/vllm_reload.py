"""Loading new weights into a CPU vLLM engine without vLLM's layer-wise reload.

vLLM's `reload_weights` (vllm 0.32) wraps every layer's weight loaders, moves each layer to the
meta device and back, buffers the incoming tensors and, once a layer is complete, re-runs its
`process_weights_after_loading`. On CPU that last step is what matters: an unquantized linear
layer (and the LM head) computes through a kernel built from its weight -- a oneDNN handle or
sgl-kernel packed copy (`dispatch_cpu_unquantized_gemm`) -- and the weight itself is then
dropped. Everything else is bookkeeping, and at a small model it is most of the sync (measured at
the embedded 409k-parameter model: 11.6 ms per sync, of which 1.6 ms the actor's gather and
2.5 ms building the ten oneDNN handles; the rest is Python).

The direct path keeps what vLLM needs and nothing else. While the engine is built,
`record_cpu_gemm_layers` notes each layer the CPU GEMM dispatch packs and the weight Parameter it
then drops (with its loader attributes and shape). A sync (`reload_weights`, run on the engine's
worker) gives each such layer its Parameter back at full size, lets the model's own
`load_weights` map checkpoint names onto vLLM's parameters (stacked qkv/gate_up, the TP slice,
a tied head), then runs the same dispatch again, which builds the kernel from the new weight and
drops the weight as before: the engine ends in the state vLLM's own reload leaves, memory
included. Just before a weight is dropped its fingerprint is kept (this rank's share of each fused
part's, vllm_tp_layout.py): the only trace of that layer's weights that the check after every sync
can read back. The runner's caches that vLLM's reload resets are reset too (LoRA state, encoder
and multi-modal caches).

Where that cannot be known to be equivalent the worker takes vLLM's `reload_weights` instead: a
quantized model, a model with a CPU GEMM layer packed outside the record (an engine built in
another process, MLA's skipped layers) or with a non-2D packed weight (conv kernels), and any GPU
engine (no CPU GEMM layers: its unquantized layers keep their weights as loaded).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import torch

from verl_lite.rollout.vllm_tp_layout import layer_shares


@dataclass
class _Packed:
    remove_weight: bool  # what vLLM asked: drop the weight once the kernel is built
    param: torch.nn.Parameter  # the weight as loaded (loader attributes intact)
    shape: torch.Size
    # this rank's share of each part's fingerprint of the weight the kernel was built from, taken
    # just before it was dropped: the only record of a packed layer's weights the sync check can
    # read (rollout/weight_check.py; None: none kept, or a layout vllm_tp_layout.py does not know)
    fingerprint: list[torch.Tensor] | None = None


# every layer the CPU GEMM dispatch packed while an engine was built in this process
_PACKED: WeakKeyDictionary[torch.nn.Module, _Packed] = WeakKeyDictionary()


def _utils():
    import vllm.model_executor.layers.utils as utils  # vLLM's callers import the dispatch at call time

    return utils


@contextmanager
def record_cpu_gemm_layers():
    """While the block builds an engine, note each layer vLLM's CPU GEMM dispatch packs."""
    utils = _utils()
    dispatch = utils.dispatch_cpu_unquantized_gemm

    def recording(layer: torch.nn.Module, remove_weight: bool) -> None:
        param = layer.weight
        fp = layer_shares(layer, "weight", param) if remove_weight and not param.is_meta else None
        dispatch(layer, remove_weight)
        _PACKED[layer] = _Packed(remove_weight, param, param.shape, fp)
        if layer.weight is not param:  # dropped: keep the Parameter, not its numbers
            param.data = torch.empty(0, dtype=param.dtype, device=param.device)

    utils.dispatch_cpu_unquantized_gemm = recording
    try:
        yield
    finally:
        utils.dispatch_cpu_unquantized_gemm = dispatch


def _packed_layers(model: torch.nn.Module, quantized: bool) -> dict[torch.nn.Module, _Packed] | None:
    """The model's packed layers when the direct path is equivalent to vLLM's reload, else None."""
    if quantized:
        return None
    # own attribute only: vLLM's LoRA wrappers forward attribute reads to the layer they wrap
    layers = {m: _PACKED.get(m) for m in model.modules() if "cpu_linear" in vars(m)}
    if not layers or any(p is None or len(p.shape) != 2 for p in layers.values()):
        return None
    return layers


def packed_fingerprints(model: torch.nn.Module) -> dict[torch.nn.Module, list[torch.Tensor]]:
    """{layer: this rank's share of each part's fingerprint of the weight its kernel was built from}
    (vllm_tp_layout.layer_shares) for the model's packed layers
    whose weight was dropped (the last direct sync's; vLLM's own reload keeps no record)."""
    out = {}
    for module in model.modules():
        packed = _PACKED.get(module)
        if packed is not None and packed.fingerprint is not None and module.weight is not packed.param:
            out[module] = packed.fingerprint
    return out


def reload_weights(worker, weights) -> bool:
    """Runs on the engine's worker (collective_rpc): load `weights` (checkpoint names, full tensors)
    into the model. True when the direct path ran, False when vLLM's own reload did."""
    runner = worker.model_runner
    model = runner.get_model()
    layers = _packed_layers(model, runner.model_config.quantization is not None)
    if layers is None:
        for module in model.modules():  # vLLM re-packs them itself: the kept fingerprints are stale
            if module in _PACKED:
                _PACKED[module].fingerprint = None
        worker.reload_weights(weights_iterator=weights)
        return False
    for layer, packed in layers.items():
        if layer.weight is not packed.param:  # give the dropped weight its storage back
            packed.param.data = torch.empty(
                packed.shape, dtype=packed.param.dtype, device=packed.param.device
            )
            layer.weight = packed.param
    model.load_weights(weights)
    dispatch = _utils().dispatch_cpu_unquantized_gemm
    for layer, packed in layers.items():
        packed.fingerprint = layer_shares(layer, "weight", layer.weight) if packed.remove_weight else None
        dispatch(layer, packed.remove_weight)  # the kernel from the new weight, as at start-up
        if layer.weight is not packed.param:
            packed.param.data = torch.empty(0, dtype=packed.param.dtype, device=packed.param.device)
    runner.reset_lora_state()  # what vLLM's reload resets after new base weights
    runner.reset_encoder_cache()
    runner.reset_mm_cache()
    return True

"""What a vLLM engine holds now, read on its worker for the check after every weight sync
(rollout/weight_check.py; VLLMRollout.landed_fingerprints runs `landed_on_worker` through
collective_rpc and adds the TP ranks' shares).

Each of the engine's parameters is reported by the checkpoint names whose values it holds (a fused
qkv_proj: q's, k's and v's, one entry per part where the layout is known), with this rank's share of
its fingerprint (engine/weight_fingerprint.py) -- a fingerprint divided by the TP ranks holding the
same values (vllm_tp_layout.py), so a group's shares add up to the trainer's tensor -- its dtype and
the scale applied on arrival (vLLM's LoRA B: alpha / r). A packed CPU GEMM layer's weight, dropped
after packing, is read from the shares kept when it was dropped (vllm_reload.py). A parameter whose
TP layout is not known is left out: its sent names are counted unverified, never silently passed.
"""

from __future__ import annotations

import torch


def _sent_parts(name: str, mapping: dict, tied_embedding: str | None) -> tuple[str, ...]:
    """The checkpoint names whose values vLLM's parameter `name` holds: the parts of a fused one
    (the model's packed_modules_mapping, as its loader stacks them), the embedding for a tied head."""
    clean = name.replace(".base_layer.", ".")  # a LoRA wrapper's base layer
    if tied_embedding is not None and clean == "lm_head.weight":
        return (tied_embedding,)
    module, attr = clean.rsplit(".", 1)
    parent, _, leaf = module.rpartition(".")
    prefix = f"{parent}." if parent else ""
    return tuple(f"{prefix}{sub}.{attr}" for sub in mapping.get(leaf, [leaf]))


def landed_on_worker(worker, base: bool, adapter: dict | None, tied: bool) -> dict:
    """Runs on the engine's worker (collective_rpc): {entry name: (this rank's share of its
    fingerprint, dtype, sent names, scale)} of this rank's weights as they are now -- the model
    runner's parameters (a packed CPU GEMM layer's from the shares kept when its weight was dropped,
    vllm_reload.py) and, with `adapter` ({config, lora_id, names}), the LoRA manager's slot of that
    adapter as every layer holds it (A and B per fused part, B scaled by alpha / r as vLLM folds it
    in). A share is a fingerprint divided by the TP ranks holding the same values
    (vllm_tp_layout.py), so the group's shares add up to the trainer's tensor; a fused parameter
    whose parts are known is one entry per part (`qkv_proj.weight[k_proj]`). A parameter whose TP
    layout is not known is left out: its sent names are counted unverified."""
    from verl_lite.rollout.vllm_reload import packed_fingerprints
    from verl_lite.rollout.vllm_tp_layout import layer_shares

    model = worker.model_runner.get_model()
    mapping = dict(getattr(model, "packed_modules_mapping", None) or {})
    names = {id(m): n for n, m in model.named_modules()}
    params = (n for n, _ in model.named_parameters())
    embedding = next((n for n in params if n.endswith("embed_tokens.weight")), None) if tied else None
    out = {}

    def add(name: str, held: list | None, dtype: torch.dtype) -> None:
        if held is None:
            return  # a TP layout not known (vllm_tp_layout.py): its sent names stay unverified
        parts = _sent_parts(name, mapping, embedding)
        if len(parts) > 1 and len(held) == len(parts):
            for part, share in zip(parts, held):
                out[f"{name}[{part.rsplit('.', 2)[-2]}]"] = (share, dtype, (part,), 1.0)
        else:
            out[name] = (sum(held[1:], held[0]), dtype, parts, 1.0)

    if base:
        seen = set()  # a parameter two modules share is read once, as named_parameters() does
        for module_name, module in model.named_modules():
            for attr, param in module.named_parameters(recurse=False):
                if param.numel() > 0 and id(param) not in seen:
                    seen.add(id(param))
                    name = f"{module_name}.{attr}" if module_name else attr
                    add(name, layer_shares(module, attr, param), param.dtype)
        for module, held in packed_fingerprints(model).items():
            add(f"{names[id(module)]}.weight", held, module.weight.dtype)
    if adapter is not None:
        out.update(_landed_adapter(worker, model, mapping, **adapter))
    return out


def _landed_adapter(worker, model, mapping: dict, config: dict, lora_id: int, names: list[str]) -> dict:
    from vllm.distributed import get_tensor_model_parallel_world_size
    from vllm.lora.peft_helper import PEFTHelper
    from vllm.lora.utils import parse_fine_tuned_lora_name

    from verl_lite.engine.weight_fingerprint import fingerprint
    from verl_lite.rollout.vllm_tp_layout import lora_copies

    world = get_tensor_model_parallel_world_size()
    manager = worker.model_runner.lora_manager
    helper = None  # built at the first B (none before an adapter was synced)
    slots = manager._adapter_manager
    sent = {n.removeprefix("base_model.model."): n for n in names}  # PEFT's file names, as synced
    slot = list(slots.lora_index_to_id).index(lora_id) if lora_id in slots.lora_index_to_id else None
    out = {}
    for name, module in model.named_modules():
        stacked = {
            "lora_A": getattr(module, "lora_a_stacked", None),
            "lora_B": getattr(module, "lora_b_stacked", None),
        }
        if stacked["lora_A"] is None:
            continue
        parent, _, leaf = name.rpartition(".")
        subs = mapping.get(leaf, [leaf])
        if len(stacked["lora_A"]) != len(subs):
            continue  # a layout this check does not know: its sent names stay unverified
        for i, sub in enumerate(subs):
            for kind, tensors in stacked.items():
                copies = lora_copies(module, kind, i, world)
                if copies is None:
                    continue  # a TP layout this check does not know: its sent names stay unverified
                file = sent.get(f"{parent}.{sub}.{kind}.weight")
                held = tensors[i][slot] if slot is not None else torch.zeros(0, dtype=tensors[i].dtype)
                scale = 1.0
                if file is not None and kind == "lora_B":
                    if helper is None:
                        max_pos = manager.max_position_embeddings
                        helper = PEFTHelper.from_dict({**config, "vllm_max_position_embeddings": max_pos})
                    scale = helper.get_rank_and_scaling(parse_fine_tuned_lora_name(file)[0])[1]
                # no sent name: no adapter there, and the slot must hold zeros (an empty sum)
                share = fingerprint(held) / copies
                out[f"{name}.{kind}[{sub}]"] = (share, held.dtype, (file,) if file else (), scale)
    return out

"""A whole padded batch packed in one call, for tests: the engine plans every micro-batch on the host
before the batch moves (engine/forward.py), so the package has no such call."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from verl_lite.engine.packing import PackPlan, pack, plan_pack


@dataclass
class Packed:
    input_ids: torch.Tensor  # (rows, width)
    position_ids: torch.Tensor  # (rows, width)
    plan: PackPlan  # unpack(values, plan) puts per-token values back in the padded layout


def pack_batch(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> Packed:
    plan = plan_pack(attention_mask, position_ids).to(input_ids.device)
    return Packed(pack(input_ids, plan), plan.position_ids, plan)

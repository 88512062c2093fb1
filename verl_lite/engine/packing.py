"""Remove-padding forward (`use_remove_padding`): pack a padded micro-batch into one row.

A padded batch (bs, S) spends attention and MLP compute on every pad position. Packed, only the
real tokens remain: they are concatenated into one row (1, nnz) whose position_ids restart at 0
for each sequence, and the model runs with `attention_mask=None`. transformers (masking_utils,
`find_packed_sequence_indices`) then reads the sequence boundaries from the position_ids (wherever
the next position is not the previous + 1) and builds a block-diagonal causal mask for sdpa and
eager attention, so no token attends across sequences; flash-attention's varlen path reads the
same boundaries. The outputs are scattered back to (bs, S, ...) with zeros on padding, so callers
slice them exactly as in the padded path.

Needs position_ids that count 0, 1, 2, ... over each row's real tokens (the layout data/ and
rollout/ produce: position_ids = cumsum(attention_mask) - 1), which `pack` checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Packed:
    input_ids: torch.Tensor  # (1, nnz)
    position_ids: torch.Tensor  # (1, nnz)
    valid: torch.Tensor  # (bs, S) bool: where each packed token came from


def pack(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> Packed:
    """The real tokens of (bs, S) tensors, concatenated row after row into one row."""
    valid = attention_mask.bool()
    counts = valid.sum(-1)
    expected = torch.cat([torch.arange(int(n), device=position_ids.device) for n in counts.tolist()])
    packed_pos = position_ids[valid]
    if not torch.equal(packed_pos, expected):
        raise ValueError(
            "use_remove_padding needs position_ids that count 0, 1, 2, ... over each sequence's real "
            "tokens (cumsum(attention_mask) - 1); this batch's do not. Set use_remove_padding=False."
        )
    return Packed(input_ids[valid].unsqueeze(0), packed_pos.unsqueeze(0), valid)


def unpack(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(1, nnz, ...) -> (bs, S, ...), zeros on padding (keeps the autograd graph)."""
    out = values.new_zeros(*valid.shape, *values.shape[2:])
    out[valid] = values[0]
    return out


@dataclass
class PackedOutput:
    logits: torch.Tensor  # (bs, S, ...) as a padded forward would return, zeros on padding


def packed_forward(module, input_ids, attention_mask, position_ids) -> PackedOutput:
    """`module`'s logits for a padded batch, computed on the packed tokens only."""
    packed = pack(input_ids, attention_mask, position_ids)
    output = module(
        input_ids=packed.input_ids,
        attention_mask=None,  # the block-causal mask comes from the packed position_ids
        position_ids=packed.position_ids,
        use_cache=False,
    )
    return PackedOutput(unpack(output.logits, packed.valid))

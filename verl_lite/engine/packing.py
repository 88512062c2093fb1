"""Remove-padding forward (`use_remove_padding`): pack a padded micro-batch into one row.

A padded batch (bs, S) spends attention and MLP compute on every pad position. Packed, only the
real tokens remain: sequences are concatenated into rows of at most S tokens (first-fit by
decreasing length), position_ids restart at 0 for each sequence, and the model runs with
`attention_mask=None`. transformers (masking_utils, `find_packed_sequence_indices`) then reads the
sequence boundaries from the position_ids (wherever the next position is not the previous + 1)
and builds a block-diagonal causal mask for sdpa and eager attention, so no token attends across
sequences; flash-attention's varlen path reads the same boundaries. The outputs are scattered back
to (bs, S, ...) with zeros on padding, so callers slice them exactly as in the padded path.

Why rows of at most S and not one long row: sdpa and eager attention cost grows with the square
of the row length even where the mask blocks it, so one row of all nnz tokens would cost nnz^2
(more than the padded bs * S^2 when the batch is large); rows of <= S cost at most rows * S^2,
with rows ~ nnz / S. Only a varlen kernel (flash-attention) makes one long row cheap.

Needs position_ids that count 0, 1, 2, ... over each row's real tokens (the layout data/ and
rollout/ produce: position_ids = cumsum(attention_mask) - 1), which `pack` checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Packed:
    input_ids: torch.Tensor  # (rows, L)
    position_ids: torch.Tensor  # (rows, L)
    valid: torch.Tensor  # (bs, S) bool: the real tokens of the padded batch
    source: torch.Tensor  # (nnz,) flat index into (rows * L) of each real token, in valid's order


def pack_rows(lengths: list[int], capacity: int) -> list[list[int]]:
    """Sequences into rows of at most `capacity` tokens, first-fit by decreasing length; each row
    keeps its sequences in batch order."""
    rows: list[list[int]] = []
    loads: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        for r, load in enumerate(loads):
            if load + lengths[i] <= capacity:
                rows[r].append(i)
                loads[r] += lengths[i]
                break
        else:
            rows.append([i])
            loads.append(lengths[i])
    return [sorted(r) for r in rows]


def pack(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> Packed:
    """The real tokens of (bs, S) tensors, packed into as few rows of at most S tokens as fit."""
    valid = attention_mask.bool()
    lengths = valid.sum(-1).tolist()
    expected = torch.cat([torch.arange(n, device=position_ids.device) for n in lengths])
    if not torch.equal(position_ids[valid], expected):
        raise ValueError(
            "use_remove_padding needs position_ids that count 0, 1, 2, ... over each sequence's real "
            "tokens (cumsum(attention_mask) - 1); this batch's do not. Set use_remove_padding=False."
        )
    rows = [r for r in pack_rows(lengths, max(valid.shape[1], 1)) if sum(lengths[i] for i in r) > 0]
    width = max((sum(lengths[i] for i in r) for r in rows), default=0)
    ids = input_ids.new_zeros(len(rows), width)
    # the slack at the end of a row is a dummy sequence of pad tokens with its own positions, so it
    # forms a block of its own and real tokens never attend to it
    pos = torch.arange(width, device=position_ids.device).repeat(len(rows), 1)
    starts = torch.zeros(len(lengths), dtype=torch.long)
    for r, members in enumerate(rows):
        offset = 0
        for i in members:
            n = lengths[i]
            ids[r, offset : offset + n] = input_ids[i][valid[i]]
            pos[r, offset : offset + n] = torch.arange(n)
            starts[i] = r * width + offset
            offset += n
        pos[r, offset:] = torch.arange(width - offset)
    source = torch.cat([starts[i] + torch.arange(n) for i, n in enumerate(lengths)]).to(input_ids.device)
    return Packed(ids, pos, valid, source)


def unpack(values: torch.Tensor, packed: Packed) -> torch.Tensor:
    """(rows, L, ...) -> (bs, S, ...), zeros on padding (keeps the autograd graph)."""
    flat = values.reshape(-1, *values.shape[2:])
    out = values.new_zeros(*packed.valid.shape, *values.shape[2:])
    out[packed.valid] = flat[packed.source]
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
    return PackedOutput(unpack(output.logits, packed))

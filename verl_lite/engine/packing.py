"""Remove-padding forward (`use_remove_padding`): pack a padded micro-batch into few rows.

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

The plan (`plan_pack`) is made on the host from the host copy of the mask, before the batch moves:
which row and offset each sequence gets is a short first-fit loop over sequences, and everything
per token is index arithmetic on whole tensors. Packing and unpacking on the device are then two
gathers and a scatter with precomputed indices, with nothing read back from the device.

Needs position_ids that count 0, 1, 2, ... over each row's real tokens (the layout data/ and
rollout/ produce: position_ids = cumsum(attention_mask) - 1), which `plan_pack` checks.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass
class PackPlan:
    """Where each real token of a padded (bs, S) batch goes in the packed (rows, width) one."""

    num_rows: int
    width: int
    token_index: torch.Tensor  # (nnz,) flat index into (bs * S) of each real token, row-major order
    packed_index: torch.Tensor  # (nnz,) flat index into (rows * width) of the same tokens
    position_ids: torch.Tensor  # (rows, width) positions of the packed rows
    shape: tuple[int, int]  # (bs, S)

    def to(self, device: torch.device, move=None) -> PackPlan:
        """The plan with its tensors on `device` (moved by `move(tensor, device)`, default `.to`)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("token_index", "packed_index", "position_ids"):
            values[key] = move(values[key], device) if move else values[key].to(device)
        return PackPlan(**values)


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


def _starts(lengths: torch.Tensor) -> torch.Tensor:
    """Exclusive prefix sums: where each run of `lengths` starts in their concatenation."""
    return torch.cumsum(lengths, 0) - lengths


def plan_pack(attention_mask: torch.Tensor, position_ids: torch.Tensor) -> PackPlan:
    """The packing of one micro-batch, from host tensors (bs, S)."""
    valid = attention_mask.cpu().bool()
    positions = position_ids.cpu()
    bs, seq = valid.shape
    lengths = valid.sum(-1)  # (bs,)
    nnz = int(lengths.sum())
    # each real token's index within its sequence: 0, 1, ... restarting per row
    token_rank = torch.arange(nnz) - torch.repeat_interleave(_starts(lengths), lengths)
    if not torch.equal(positions[valid], token_rank):
        raise ValueError(
            "use_remove_padding needs position_ids that count 0, 1, 2, ... over each sequence's real "
            "tokens (cumsum(attention_mask) - 1); this batch's do not. Set use_remove_padding=False."
        )
    # the rows' bookkeeping in Python ints: a few tensor ops per row cost more than the loop
    sizes = lengths.tolist()
    rows = [r for r in pack_rows(sizes, max(seq, 1)) if sum(sizes[i] for i in r) > 0]
    row_loads = [sum(sizes[i] for i in r) for r in rows]
    loads = torch.tensor(row_loads, dtype=torch.long)
    width = max(row_loads) if rows else 0
    starts = [0] * bs  # flat index of each sequence's first packed token
    for r, members in enumerate(rows):
        offset = r * width
        for i in members:  # in batch order: each starts where the previous one ends
            starts[i] = offset
            offset += sizes[i]
    packed_index = torch.repeat_interleave(torch.tensor(starts, dtype=torch.long), lengths) + token_rank
    # the slack after a row's last sequence counts 0, 1, ... too: a dummy sequence of its own, so
    # real tokens never attend to it
    packed_pos = (torch.arange(width).unsqueeze(0) - loads.unsqueeze(1)).clamp(min=0)
    packed_pos.view(-1)[packed_index] = token_rank
    token_index = torch.nonzero(valid.view(-1)).squeeze(1)
    return PackPlan(len(rows), width, token_index, packed_index, packed_pos, (bs, seq))


def pack(input_ids: torch.Tensor, plan: PackPlan) -> torch.Tensor:
    """(bs, S) -> (rows, width) token ids on input_ids' device; pad id 0 in the slack."""
    packed = input_ids.new_zeros(plan.num_rows * plan.width)
    packed[plan.packed_index] = input_ids.reshape(-1)[plan.token_index]
    return packed.view(plan.num_rows, plan.width)


def unpack(values: torch.Tensor, plan: PackPlan) -> torch.Tensor:
    """(rows, width, ...) -> (bs, S, ...), zeros on padding (keeps the autograd graph)."""
    flat = values.reshape(-1, *values.shape[2:])
    out = values.new_zeros(plan.shape[0] * plan.shape[1], *values.shape[2:])
    out = out.index_copy(0, plan.token_index, flat[plan.packed_index])
    return out.view(*plan.shape, *values.shape[2:])


@dataclass
class PackedOutput:
    logits: torch.Tensor  # (bs, S, ...) as a padded forward would return, zeros on padding


def packed_forward(module, input_ids, plan: PackPlan) -> PackedOutput:
    """`module`'s logits for a padded batch, computed on the packed tokens only."""
    output = module(
        input_ids=pack(input_ids, plan),
        attention_mask=None,  # the block-causal mask comes from the packed position_ids
        position_ids=plan.position_ids,
        use_cache=False,
    )
    return PackedOutput(unpack(output.logits, plan))

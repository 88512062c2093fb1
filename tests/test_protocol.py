"""DataProto: chunk, concat, union, repeat, select/pop and padding round trips."""

import numpy as np
import pytest
import torch

from verl_lite.protocol import DataProto


def make(n=6):
    return DataProto.from_dict(
        {"x": torch.arange(n * 2).view(n, 2), "y": torch.arange(n).float()},
        {"name": [f"row{i}" for i in range(n)], "info": [{"i": i} for i in range(n)]},
        {"temperature": 0.7},
    )


def test_chunk_then_concat_is_identity_and_keeps_order():
    data = make(6)
    parts = data.chunk(3)
    assert [len(p) for p in parts] == [2, 2, 2]
    assert parts[1].batch["y"].tolist() == [2.0, 3.0]
    assert list(parts[2].non_tensor_batch["name"]) == ["row4", "row5"]
    back = DataProto.concat(parts)
    assert torch.equal(back.batch["x"], data.batch["x"])
    assert list(back.non_tensor_batch["name"]) == list(data.non_tensor_batch["name"])
    assert back.meta_info == {"temperature": 0.7}


def test_chunk_refuses_uneven_split():
    with pytest.raises(ValueError, match="pad_to_divisor"):
        make(5).chunk(2)


def test_pad_to_divisor_round_trip():
    data = make(5)
    padded, pad = data.pad_to_divisor(4)
    assert (len(padded), pad) == (8, 3)
    assert padded.batch["y"].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]  # padding repeats the first rows
    back = padded.unpad(pad)
    assert torch.equal(back.batch["x"], data.batch["x"])
    assert list(back.non_tensor_batch["name"]) == list(data.non_tensor_batch["name"])
    same, zero = data.pad_to_divisor(5)
    assert zero == 0 and same is data


def test_repeat_interleaved_and_tiled():
    data = make(2)
    inter = data.repeat(3, interleave=True)
    assert inter.batch["y"].tolist() == [0, 0, 0, 1, 1, 1]
    assert list(inter.non_tensor_batch["name"]) == ["row0"] * 3 + ["row1"] * 3
    tiled = data.repeat(2, interleave=False)
    assert tiled.batch["y"].tolist() == [0, 1, 0, 1]


def test_union_merges_and_rejects_conflicts():
    a = make(3)
    b = DataProto.from_dict({"z": torch.ones(3)}, {"extra": ["e"] * 3}, {"step": 1})
    merged = a.union(b)
    assert set(merged.batch) == {"x", "y", "z"} and set(merged.non_tensor_batch) == {"name", "info", "extra"}
    assert merged.meta_info == {"temperature": 0.7, "step": 1}
    with pytest.raises(ValueError, match="'y' differs"):
        make(3).union(DataProto.from_dict({"y": torch.zeros(3)}))


def test_select_pop_and_indexing():
    data = make(4)
    sel = data.select(["x"], ["name"])
    assert set(sel.batch) == {"x"} and set(sel.non_tensor_batch) == {"name"}
    popped = data.pop(["y"])
    assert "y" not in data.batch and popped.batch["y"].tolist() == [0, 1, 2, 3]
    picked = data[torch.tensor([3, 0])]
    assert picked.batch["x"].tolist() == [[6, 7], [0, 1]]
    assert list(picked.non_tensor_batch["name"]) == ["row3", "row0"]


def test_mismatched_lengths_are_rejected():
    with pytest.raises(ValueError, match="disagree on batch size"):
        DataProto.from_dict({"x": torch.zeros(3)}, {"n": ["a", "b"]})


def test_non_tensor_fields_become_object_arrays():
    data = make(2)
    assert (
        isinstance(data.non_tensor_batch["info"], np.ndarray)
        and data.non_tensor_batch["info"].dtype == object
    )


def test_pickle_round_trip_keeps_every_tensor_and_gives_writable_copies():
    """DataProto crosses Ray pickled, host tensors as numpy buffers (protocol.py): every dtype,
    including bf16 (no numpy type) and non-contiguous views, comes back equal; tensors received from
    read-only out-of-band buffers (Ray's inline results) are writable copies of their own."""
    import pickle

    batch = {
        "ids": torch.arange(6).view(2, 3),
        "bf16": torch.randn(2, 4).to(torch.bfloat16),
        "strided": torch.randn(2, 6)[:, ::2],
        "mask": torch.tensor([True, False]),
    }
    data = DataProto.from_dict(batch, {"uid": ["a", "b"]}, {"temperature": 0.7})
    buffers = []
    raw = pickle.dumps(data, protocol=5, buffer_callback=buffers.append)
    assert buffers, "host tensors travel as out-of-band buffers"
    back = pickle.loads(raw, buffers=[bytes(b.raw()) for b in buffers])  # bytes: read-only
    for key, value in batch.items():
        assert back.batch[key].dtype == value.dtype and torch.equal(back.batch[key], value), key
    assert list(back.non_tensor_batch["uid"]) == ["a", "b"] and back.meta_info == {"temperature": 0.7}
    back.batch["ids"].add_(1)
    assert torch.equal(data.batch["ids"], torch.arange(6).view(2, 3))

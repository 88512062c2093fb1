"""Reading DCP folders without running what they contain (engine/dcp_safe.py).

A real DCP folder (fp32, bf16 and int64 tensors, a non-tensor item) reads back through the safe
reader, and its `.metadata` names nothing outside the allowlist (walked opcode by opcode). Every
crafted `.metadata` payload (built here, opcode by opcode: dotted names, an undotted global reached
through an allowed module, REDUCE on callables that are not allowed) is refused by the metadata
reader and by the DCP load itself, and nothing runs; the same payloads do run under plain pickle,
so "nothing ran" means they were refused. A `.metadata` of the wrong shape is refused as well.
"""

from __future__ import annotations

import os
import pickle
import shutil

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.filesystem import _StorageInfo

from tests.helpers.bad_inputs import (
    METADATA_PAYLOADS,
    payload_ran,
    pickle_globals,
    register_payload_extension,
)
from verl_lite.engine.dcp_safe import ALLOWED, read_dcp, read_dcp_metadata


def _state() -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        "w": torch.randn(16, 4, generator=g),
        "h": torch.randn(8, generator=g).to(torch.bfloat16),
        "step": torch.tensor(3, dtype=torch.int64),
        "param_groups": [{"lr": 0.5, "betas": (0.9, 0.99), "params": ["w"]}],
    }


@pytest.fixture(scope="module")
def dcp_dir(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("dcp") / "model")
    dcp.save(_state(), checkpoint_id=folder, no_dist=True)
    return folder


def _empty_like(state: dict) -> dict:
    out = {k: torch.zeros_like(v) for k, v in state.items() if isinstance(v, torch.Tensor)}
    return out | {"param_groups": [{"lr": 0.0, "betas": (0.0, 0.0), "params": []}]}


def test_a_real_dcp_folder_reads_back_and_names_only_allowed_globals(dcp_dir):
    raw = open(os.path.join(dcp_dir, ".metadata"), "rb").read()
    named = pickle_globals(raw)
    assert ("torch", "bfloat16") in named and ("torch.distributed.checkpoint.metadata", "Metadata") in named
    assert named <= ALLOWED, named - ALLOWED
    state = _empty_like(_state())
    read_dcp(state, dcp_dir, no_dist=True)
    want = _state()
    for key in ("w", "h", "step"):
        assert torch.equal(state[key], want[key]) and state[key].dtype == want[key].dtype
    assert state["param_groups"] == [{"lr": 0.5, "betas": (0.9, 0.99), "params": ["w"]}]


@pytest.fixture
def hostile(dcp_dir, tmp_path):
    """A copy of the good folder, ready for a crafted .metadata; cleans up what a payload could set."""
    folder = tmp_path / "model"
    shutil.copytree(dcp_dir, folder)
    register_payload_extension()
    yield folder
    if hasattr(os, "VERL_LITE_PICKLE_RAN"):
        del os.VERL_LITE_PICKLE_RAN


@pytest.mark.parametrize("kind", sorted(METADATA_PAYLOADS))
def test_a_crafted_metadata_is_refused_and_runs_nothing(kind, hostile, tmp_path):
    marker = tmp_path / "RAN"
    (hostile / ".metadata").write_bytes(METADATA_PAYLOADS[kind](marker))
    with pytest.raises(
        ValueError, match=r"refusing to load .*/model/\.metadata: not a torch.distributed.checkpoint"
    ):
        read_dcp_metadata(str(hostile))
    with pytest.raises(ValueError, match="refusing to load"):  # DCP's own load reads it the same way
        read_dcp(_empty_like(_state()), str(hostile), no_dist=True)
    assert not payload_ran(marker), f"the {kind} payload ran"


@pytest.mark.parametrize("kind", sorted(METADATA_PAYLOADS))
def test_each_payload_does_run_under_plain_pickle(kind, hostile, tmp_path):
    """The control: what the reader refuses is a working exploit, not a broken pickle."""
    marker = tmp_path / "RAN"
    pickle.loads(METADATA_PAYLOADS[kind](marker))
    assert payload_ran(marker)


def test_the_refusal_names_what_the_payload_asked_for(hostile, tmp_path):
    (hostile / ".metadata").write_bytes(METADATA_PAYLOADS["dotted_via_dcp_filesystem"](tmp_path / "RAN"))
    with pytest.raises(
        ValueError, match=r"dotted name torch\.distributed\.checkpoint\.filesystem\.os\.system"
    ):
        read_dcp_metadata(str(hostile))
    (hostile / ".metadata").write_bytes(METADATA_PAYLOADS["reduce_os_system"](tmp_path / "RAN"))
    with pytest.raises(ValueError, match=r"it names os\.system, which DCP metadata never does"):
        read_dcp_metadata(str(hostile))


def test_metadata_of_the_wrong_shape_is_refused(hostile, dcp_dir):
    (hostile / ".metadata").write_bytes(pickle.dumps({"state_dict_metadata": {}}))
    with pytest.raises(ValueError, match="it unpickles to a builtins.dict, not a DCP Metadata"):
        read_dcp_metadata(str(hostile))
    metadata = read_dcp_metadata(dcp_dir)
    index = next(iter(metadata.storage_data))
    metadata.storage_data[index] = _StorageInfo("../../elsewhere.distcp", 0, 10)
    (hostile / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(ValueError, match=r"points outside the folder \('../../elsewhere.distcp'\)"):
        read_dcp_metadata(str(hostile))
    (hostile / ".metadata").write_bytes(b"\x80\x04not a pickle")
    with pytest.raises(ValueError, match="refusing to load"):
        read_dcp_metadata(str(hostile))

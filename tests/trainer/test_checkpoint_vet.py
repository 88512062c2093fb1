"""Vetting a checkpoint on the driver: a pickled object inside a DCP shard is refused without running it,
and a good checkpoint passes."""

import os
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from tests.helpers.bad_inputs import _Runs, write_checkpoint
from verl_lite.trainer.checkpoint_vet import vet_checkpoint

ACTOR = {"actor": ["model", "optimizer", "extra"]}


def test_a_good_checkpoint_passes_and_an_object_in_a_shard_is_refused(tmp_path):
    good = write_checkpoint(tmp_path / "ckpt" / "good")
    vet_checkpoint(good, ACTOR, 2, "k")
    marker = str(tmp_path / "RAN")
    optim = Path(good) / "actor" / "optimizer"
    for f in optim.iterdir():
        f.unlink()
    state = {"state": {"w": {"exp_avg": torch.zeros(2)}}, "param_groups": [{"lr": _Runs(marker)}]}
    dcp.save(state, checkpoint_id=str(optim), no_dist=True)
    with pytest.raises(
        ValueError, match=r"k: refusing to load .*optimizer/__0_0.distcp: item 'param_groups.0.lr'"
    ):
        vet_checkpoint(good, ACTOR, 2, "k")
    assert not os.path.exists(marker)

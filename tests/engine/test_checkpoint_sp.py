"""Engine checkpoints under sequence parallelism (ulysses sp=2 on 2 gloo ranks: one data-parallel
group, so both ranks have dp_rank 0).

Each rank's extra state is its own file named by the world size and global rank (verl's
extra_state_world_size_{world}_rank_{rank}.pt), which is what the trainer's resume checks look
for; the HF export is written by global rank 0 alone (the full state dict is gathered onto it and
the other ranks hold nothing). A fresh engine loads each rank's own extras back.
"""

from __future__ import annotations

import os

import torch
from safetensors.torch import load_file

from tests.helpers.configs import fp32_fsdp, tiny_model, tiny_optim
from tests.helpers.dist import run_ranks
from verl_lite.engine.checkpoint import HF_DIR, load_engine, save_engine
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.engine.mesh import build_layout
from verl_lite.trainer import checkpoint as ckpt

CONTENTS = ["model", "optimizer", "extra", "hf_model"]


def _engine(model_dir):
    layout = build_layout("cpu", sp_size=2)
    model = tiny_model(model_dir, use_remove_padding=True)
    return FSDPEngine(model, fp32_fsdp(), layout, role="actor", optim_cfg=tiny_optim()), layout


def _save_and_load(rank, world, model_dir, path):
    engine, layout = _engine(model_dir)
    torch.manual_seed(10 + rank)  # each rank's own RNG state goes into its own file
    save_engine(engine, path, CONTENTS, extra={"rank": rank})
    after_save = torch.rand(3)
    fresh, _ = _engine(model_dir)
    extra = load_engine(fresh, path, ["model", "optimizer", "extra"])
    return layout.dp_rank, extra, torch.equal(torch.rand(3), after_save)


def test_sp_ranks_write_their_own_extras_and_only_global_rank_0_the_hf_folder(tiny_model_dir, tmp_path):
    step = tmp_path / "global_step_1"
    path = str(step / "actor")
    results = run_ranks(_save_and_load, 2, tiny_model_dir, path)
    assert [dp_rank for dp_rank, _, _ in results] == [0, 0], "sp=2 on 2 ranks: one data-parallel group"
    for rank, (_, extra, rng_back) in enumerate(results):
        assert extra == {"rank": rank}, "each rank loads the extras it saved, not its sp peer's"
        assert rng_back, "each rank's RNG state comes back"
    names = sorted(n for n in os.listdir(path) if n.startswith("extra_state_"))
    assert names == ["extra_state_world_size_2_rank_0.pt", "extra_state_world_size_2_rank_1.pt"]
    weights = load_file(os.path.join(path, HF_DIR, "model.safetensors"))
    assert weights and all(t.numel() > 0 for t in weights.values())
    # the trainer's resume check (check_complete) finds what the workers wrote, for world size 2
    ckpt.write_trainer_state(str(step), 1, {"epoch": 0, "offset": 0})
    ckpt.check_complete(str(step), {"actor": ["model", "optimizer", "extra"]}, 2, "k", without_manifest=True)

"""A checkpoint saved with another LoRA setup is named at start-up (trainer/checkpoint_lora.py).

Real engine checkpoints (1 and 2 gloo ranks, the tiny model) with LoRA off, rank 8 on every linear,
and rank 8 on q/v only; resumes that switch LoRA on or off, change lora_rank or target_modules get
one line each, before Ray; the same setup passes. Before the check, start-up passed all of them and
the workers failed loading shards DCP could not find or fit.
"""

from __future__ import annotations

import os

import pytest
from torch.distributed.device_mesh import init_device_mesh

from tests.helpers.configs import fp32_fsdp, tiny_model, tiny_optim
from tests.helpers.dist import run_ranks
from tests.trainer.test_extensions import ARR, load
from verl_lite.engine.checkpoint import save_engine
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.trainer import checkpoint as ckpt
from verl_lite.trainer.checkpoint_lora import lora_problems
from verl_lite.trainer.trainer_checkpoint import TrainerCheckpoint

SETUPS = {
    "off": {},
    "all8": {"lora_rank": 8, "lora_alpha": 16, "target_modules": "all-linear"},
    "qv8": {"lora_rank": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]},
}


def _save(rank, world, model_dir, path, lora, contents):
    mesh = init_device_mesh("cpu", (world,))
    engine = FSDPEngine(
        tiny_model(model_dir, **lora), fp32_fsdp(), mesh, role="actor", optim_cfg=tiny_optim()
    )
    save_engine(engine, path, contents)


@pytest.fixture(scope="module")
def saved(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("lora_ckpts")
    for name, lora in SETUPS.items():
        run_ranks(_save, 1, tiny_model_dir, str(root / name / "actor"), lora, ["model"])
    return root


def _problems(saved, tiny_model_dir, name, **lora):
    return lora_problems(str(saved / name), {"actor": (tiny_model(tiny_model_dir, **lora), "causal_lm")}, "k")


def test_the_same_setup_passes(saved, tiny_model_dir):
    for name, lora in SETUPS.items():
        assert _problems(saved, tiny_model_dir, name, **lora) == [], name


def test_lora_switched_on_or_off_is_named(saved, tiny_model_dir):
    [off] = _problems(saved, tiny_model_dir, "all8")
    assert off.startswith("k: the checkpoint's actor was saved with another LoRA setup than this run's: ")
    assert "it was saved with LoRA (rank 8); LoRA is off here (lora_rank=0)" in off
    assert off.endswith("or start afresh (trainer.resume_mode=disable)")
    [on] = _problems(saved, tiny_model_dir, "off", **SETUPS["all8"])
    assert "it was saved without LoRA (full weights); actor_rollout_ref.model.lora_rank=8 here" in on


def test_another_rank_or_other_target_modules_are_named(saved, tiny_model_dir):
    [rank] = _problems(saved, tiny_model_dir, "all8", **{**SETUPS["all8"], "lora_rank": 4})
    assert "its adapters have rank 8, actor_rollout_ref.model.lora_rank=4 here" in rank
    [fewer] = _problems(saved, tiny_model_dir, "all8", **SETUPS["qv8"])
    assert "it adapts model.layers.0.mlp.down_proj, model.layers.0.mlp.gate_proj (and " in fewer
    assert "which this run's actor_rollout_ref.model.target_modules=['q_proj', 'v_proj'] does not" in fewer
    [more] = _problems(saved, tiny_model_dir, "qv8", **SETUPS["all8"])
    assert "it has no adapter on model.layers.0.mlp.down_proj" in more and "'all-linear' adapts" in more


def test_start_up_refuses_a_lora_checkpoint_for_a_run_without_lora(tmp_path):
    """Through TrainerCheckpoint, as main_ppo builds it before Ray: one ValueError line."""
    model = load(tmp_path).actor_rollout_ref.model.path  # the demo's tiny model, built locally
    tmp = ckpt.begin(str(tmp_path), 2)
    contents = ["model", "optimizer", "extra"]
    run_ranks(_save, 2, model, os.path.join(tmp, "actor"), SETUPS["all8"], contents)
    ckpt.write_trainer_state(tmp, 2, {"epoch": 0, "offset": 8})
    ckpt.commit(str(tmp_path), 2, tmp)
    with pytest.raises(ValueError) as info:
        TrainerCheckpoint(load(tmp_path, "trainer.resume_mode=auto", f"{ARR}.model.lora_rank=0"), False, 2)
    line = str(info.value)
    assert len(line.splitlines()) == 1 and "saved with LoRA (rank 8); LoRA is off here" in line, line
    assert line.startswith(
        "trainer.resume_mode=auto (latest_checkpointed_iteration.txt in trainer.default_local_dir)"
    )

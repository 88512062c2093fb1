"""parallelize.py's one decision: an engine on one rank with nothing to cast or offload is not sharded,
and trains, offloads and checkpoints exactly as the same engine under FSDP2.

One real 1-rank process builds each engine twice, once as the engine decides (plain params) and once
with fully_shard forced (DTensor params), and trains both on the same batches: 3 steps of 2 mini-batches
in micro-batches of 2 (accumulation), with and without manual param+optimizer offload (the optimizer
state streams through the same units). Params after every step, pg_loss and grad_norm must be equal
bit for bit. Each then saves a checkpoint: the DCP files (model and optimizer) hold the same tensors
under the same metadata, and each checkpoint, loaded by the other kind of engine, trains on to the
same weights.
"""

from __future__ import annotations

import os

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy
from torch.distributed.tensor import DTensor

from tests.helpers.configs import fp32_fsdp, tiny_actor, tiny_model
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.config.schema import OptimConfig
from verl_lite.engine import parallelize
from verl_lite.engine.checkpoint import load_engine, read_dcp_metadata, save_engine
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.model_merger import load_full_state_dict
from verl_lite.workers.actor import PPOActor

ROWS, MINI, MICRO, STEPS = 8, 4, 2, 3
MODES = {"none": {}, "param_opt_offload": {"param_offload": True, "optimizer_offload": True}}
CONTENTS = ["model", "optimizer", "extra"]


def _build(model_dir, fsdp_over: dict, sharded: bool):
    decide = parallelize.shards_params
    if sharded:  # what the engine would run were one rank sharded as several are
        parallelize.shards_params = lambda *args: True
    try:
        cfg = tiny_actor(grad_clip=0.5)
        cfg.clip_ratio_low = cfg.clip_ratio_high = 0.2
        cfg.optim = OptimConfig(lr=5e-3, weight_decay=0.01, total_training_steps=STEPS + 1)
        mesh = init_device_mesh("cpu", (1,))
        engine = FSDPEngine(
            tiny_model(model_dir),
            fp32_fsdp(**fsdp_over),
            mesh,
            role="actor",
            optim_cfg=cfg.optim,
            grad_clip=0.5,
        )
    finally:
        parallelize.shards_params = decide
    return engine, PPOActor(engine, cfg, response_length=5, temperature=1.0)


def _params(engine) -> dict[str, torch.Tensor]:
    return {n: t.clone() for n, t in engine.iter_full_params()}


def _train(actor, batches) -> list:
    history = []
    for batch in batches:
        metrics = actor.update(batch, mini_size=MINI, micro_size=MICRO)
        history.append((metrics["actor/pg_loss"], metrics["actor/grad_norm"], _params(actor.engine)))
    return history


def _dcp(folder: str) -> dict:
    """A DCP folder's metadata layout (per key: kind, size, chunks) and its tensors, unsharded."""
    meta = read_dcp_metadata(folder).state_dict_metadata
    layout = {
        k: (type(v).__name__, getattr(v, "size", None), getattr(v, "chunks", None)) for k, v in meta.items()
    }
    return {"layout": layout, "tensors": load_full_state_dict(folder)}


def _one_rank(rank, world, model_dir, root):
    batches = [make_ppo_batch(vocab=110, bs=ROWS, seed=30 + s) for s in range(STEPS + 1)]
    out = {}
    for mode, fsdp_over in MODES.items():
        runs = {}
        for sharded in (False, True):
            engine, actor = _build(model_dir, fsdp_over, sharded)
            kind = "fsdp2" if sharded else "plain"
            runs[kind] = {
                "dtensor": [isinstance(p, DTensor) for p in engine.module.parameters()],
                "history": _train(actor, batches[:STEPS]),
            }
            path = os.path.join(root, mode, kind)
            save_engine(engine, path, CONTENTS)
            runs[kind]["model"] = _dcp(os.path.join(path, "model"))
            runs[kind]["optimizer"] = _dcp(os.path.join(path, "optimizer"))
        for kind, other in (("plain", "fsdp2"), ("fsdp2", "plain")):
            engine, actor = _build(model_dir, fsdp_over, sharded=kind == "fsdp2")
            load_engine(engine, os.path.join(root, mode, other), CONTENTS)
            runs[kind]["resumed"] = _train(actor, batches[STEPS:])
        out[mode] = runs
    # the decision itself, on this one-rank mesh
    mesh = init_device_mesh("cpu", (1,))
    model = torch.nn.Linear(3, 2)
    fp32, bf16 = (
        MixedPrecisionPolicy(param_dtype=torch.float32),
        MixedPrecisionPolicy(param_dtype=torch.bfloat16),
    )
    out["decide"] = {
        "fp32": parallelize.shards_params(model, mesh, fp32, OffloadPolicy()),
        "bf16 compute": parallelize.shards_params(model, mesh, bf16, OffloadPolicy()),
        "bf16 reduce": parallelize.shards_params(
            model, mesh, MixedPrecisionPolicy(reduce_dtype=torch.bfloat16), OffloadPolicy()
        ),
        "offload_policy": parallelize.shards_params(model, mesh, fp32, CPUOffloadPolicy(pin_memory=False)),
    }
    return out


@pytest.fixture(scope="module")
def one_rank(tiny_model_dir, tmp_path_factory):
    return run_ranks(_one_rank, 1, tiny_model_dir, str(tmp_path_factory.mktemp("plain_vs_fsdp2")))[0]


def test_one_rank_is_sharded_only_to_cast_or_offload(one_rank):
    assert one_rank["decide"] == {
        "fp32": False,
        "bf16 compute": True,
        "bf16 reduce": True,
        "offload_policy": True,
    }


def _same_history(a: list, b: list) -> None:
    assert len(a) == len(b) > 0
    for (loss_a, norm_a, params_a), (loss_b, norm_b, params_b) in zip(a, b):
        assert (loss_a, norm_a) == (loss_b, norm_b)
        assert params_a.keys() == params_b.keys()
        assert all(torch.equal(params_a[n], params_b[n]) for n in params_a), "params differ"


@pytest.mark.parametrize("mode", list(MODES))
def test_the_unsharded_engine_trains_bit_for_bit_as_fsdp2(one_rank, mode):
    runs = one_rank[mode]
    assert not any(runs["plain"]["dtensor"]), "one rank in fp32: plain params"
    assert all(runs["fsdp2"]["dtensor"]), "the forced engine really runs FSDP2"
    _same_history(runs["plain"]["history"], runs["fsdp2"]["history"])
    first, last = runs["plain"]["history"][0][2], runs["plain"]["history"][-1][2]
    assert any(not torch.equal(first[n], last[n]) for n in first), "the params moved"


@pytest.mark.parametrize("mode", list(MODES))
def test_checkpoints_hold_the_same_state_and_load_across(one_rank, mode):
    runs = one_rank[mode]
    for part in ("model", "optimizer"):
        plain, fsdp2 = runs["plain"][part], runs["fsdp2"][part]
        assert plain["layout"] == fsdp2["layout"], part
        assert plain["tensors"].keys() == fsdp2["tensors"].keys() and plain["tensors"], part
        for key, value in plain["tensors"].items():
            other = fsdp2["tensors"][key]
            assert torch.equal(value, other), f"{part}: {key}"
    # plain loaded FSDP2's checkpoint and FSDP2 plain's: the same next step
    _same_history(runs["plain"]["resumed"], runs["fsdp2"]["resumed"])

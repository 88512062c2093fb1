"""Every weight sync verified (rollout/weight_check.py), on the HF backend: a real sync passes the
check, a sync whose copy step does nothing is stopped at that sync, naming the parameter -- full
weights over two FSDP2 ranks (the trainer's fingerprint added over its shards) and a LoRA adapter;
and a bf16 rollout (the trainer's fp32 weights cast on the way) passes with no false alarm."""

from __future__ import annotations

from torch.distributed.device_mesh import init_device_mesh

from tests.helpers.configs import fp32_fsdp, tiny_actor, tiny_model, tiny_optim, tiny_rollout
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.rollout.hf_rollout import HFRollout
from verl_lite.rollout.weight_check import SyncCheck, WeightSyncMismatch
from verl_lite.rollout.weight_sync import build_weight_sync
from verl_lite.workers.actor import PPOActor

RESPONSE = 5


def _actor(model_cfg, world):
    optim = tiny_optim(lr=2e-2, weight_decay=0.0, total_training_steps=4)
    cfg = tiny_actor(grad_clip=1.0, ppo_epochs=1, entropy_coeff=0.0, use_kl_loss=False, optim=optim)
    engine = FSDPEngine(
        model_cfg,
        fp32_fsdp(),
        init_device_mesh("cpu", (world,)),
        role="actor",
        optim_cfg=cfg.optim,
        grad_clip=1.0,
    )
    return engine, PPOActor(engine, cfg, response_length=RESPONSE, temperature=1.0)


def skip_copies(rollout, method: str):
    """The rollout's `method` walks the tensors it is given (the gather is collective) but copies
    none of them into the engine: a sync that silently does not arrive."""
    real = getattr(rollout, method)

    def dropped(tensors, *args):
        for _ in tensors:
            pass
        return {"update_weights_s": 0.0, "update_weights_gb": 0.0}

    setattr(rollout, method, dropped)
    return lambda: setattr(rollout, method, real)


def _stopped(check, **kwargs) -> str:
    try:
        check(**kwargs)
    except WeightSyncMismatch as e:
        return str(e)
    return ""


def _full(rank, world, model_dir):
    model_cfg = tiny_model(model_dir)
    engine, actor = _actor(model_cfg, world)
    batch = make_ppo_batch(vocab=110, bs=8, response_len=RESPONSE, seed=4)
    out = {}
    for dtype in ("fp32", "bf16"):
        rollout = HFRollout(model_cfg, tiny_rollout(seed=3, dtype=dtype), build_tokenizer(), rank=0)
        sync = build_weight_sync(engine, rollout, bucket_bytes=1 << 16, dtype=rollout.model.dtype)
        check = SyncCheck(engine, rollout, "hf")
        sync()
        out[dtype] = {"start": check(base=True, sync=1, version=0)}
        actor.update(batch, mini_size=8, micro_size=4)
        out[dtype]["stale"] = _stopped(check, base=True, sync=1, version=1)  # the actor moved, no sync
        sync()
        out[dtype]["synced"] = _stopped(check, base=True, sync=2, version=1)
    restore = skip_copies(rollout, "update_weights")
    actor.update(batch, mini_size=8, micro_size=4)
    sync()  # gathers, copies nothing
    out["skipped"] = _stopped(check, base=True, sync=2, version=3)
    restore()
    sync()
    out["resynced"] = _stopped(check, base=True, sync=3, version=3)
    return out


def test_hf_full_sync_checked_and_a_skipped_one_stopped(tiny_model_dir):
    for out in run_ranks(_full, 2, tiny_model_dir):
        for dtype in ("fp32", "bf16"):
            assert out[dtype]["start"]["perf/weight_sync_unverified_params"] == 0
            assert out[dtype]["start"]["perf/weight_sync_verified_params"] > 10
            assert out[dtype]["synced"] == "", f"{dtype}: a real sync must pass: {out[dtype]['synced']}"
            assert "did not arrive" in out[dtype]["stale"], f"{dtype}: a sync never made is caught"
        msg = out["skipped"]
        assert msg.startswith("weight sync 2 (actor version 3, hf rollout) did not arrive: the engine's "), (
            msg
        )
        assert "\n" not in msg and "does not hold the trainer's model." in msg, msg
        assert out["resynced"] == ""


def _lora(rank, world, model_dir):
    model_cfg = tiny_model(model_dir, lora_rank=8, lora_alpha=16, target_modules=["q_proj", "v_proj"])
    engine, actor = _actor(model_cfg, world)
    rollout = HFRollout(model_cfg, tiny_rollout(seed=3), build_tokenizer(), rank=0)
    sync, check = build_weight_sync(engine, rollout), SyncCheck(engine, rollout, "hf")
    batch = make_ppo_batch(vocab=110, bs=8, response_len=RESPONSE, seed=4)
    out = {"start": check(base=True, sync=0, version=0)}
    actor.update(batch, mini_size=8, micro_size=4)
    sync()
    out["synced"] = check(base=False, sync=1, version=1)
    restore = skip_copies(rollout, "update_adapter")
    actor.update(batch, mini_size=8, micro_size=4)
    sync()  # the adapter never reaches the rollout
    out["skipped"] = _stopped(check, base=False, sync=2, version=2)
    restore()
    return out


def test_hf_adapter_sync_checked_and_a_skipped_one_stopped(tiny_model_dir):
    out = run_ranks(_lora, 1, tiny_model_dir)[0]
    assert out["start"]["perf/weight_sync_unverified_params"] == 0
    assert out["synced"]["perf/weight_sync_verified_params"] == 2 * 2 * 2, "A and B of q and v, 2 layers"
    msg = out["skipped"]
    assert "hf rollout) did not arrive" in msg and ".lora_" in msg, msg


def _separate(rank, world, model_dir, lora):
    """separate_async's path (workers/rollout_worker.py, trainer/separate_async.py): the trainer's sync
    into an Outbox on every rank, rank 0's tensors delivered to the rollout group's own engine, its
    parameters read back where they landed and compared with the trainer's expected fingerprints
    (computed by every trainer rank together from the forms the group reported)."""
    import torch.distributed as dist

    from verl_lite.rollout.weight_check import compare
    from verl_lite.rollout.weight_sync import Outbox, deliver

    extra = {"lora_rank": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]} if lora else {}
    model_cfg = tiny_model(model_dir, **extra)
    engine, actor = _actor(model_cfg, world)
    group = HFRollout(model_cfg, tiny_rollout(seed=3), build_tokenizer(), rank=0)  # the group's engine
    outbox = Outbox(keep=rank == 0, weights_loaded=group.weights_loaded)
    export, check = build_weight_sync(engine, outbox), SyncCheck(engine, group, "hf")
    batch = make_ppo_batch(vocab=110, bs=8, response_len=RESPONSE, seed=4)
    warned: set[str] = set()

    def push(sync: int, version: int, base: bool) -> str:
        export()
        sent = outbox.take()
        landed = [None]
        if rank == 0:
            deliver(sent, group)
            landed = [group.landed_fingerprints(base=base, adapter=lora)]
        dist.broadcast_object_list(landed, src=0)  # the driver hands rank 0's report to every trainer rank
        expected = check.expected(landed[0], base=base, adapter=lora)
        try:
            return compare(landed[0], expected, sync, version, "hf rollout group", warned)
        except WeightSyncMismatch as e:
            return str(e)

    out = {"start": push(1, 0, base=True), "kept": sum(len(x[1]) for x in outbox.sent)}
    actor.update(batch, mini_size=8, micro_size=4)
    out["synced"] = push(2, 1, base=not lora)
    restore = skip_copies(group, "update_adapter" if lora else "update_weights")
    actor.update(batch, mini_size=8, micro_size=4)
    out["skipped"] = push(3, 2, base=not lora)  # gathered and sent, never copied into the engine
    restore()
    out["resynced"] = push(4, 2, base=not lora)
    return out


def test_separate_rollout_group_full_sync_checked_and_a_skipped_one_stopped(tiny_model_dir):
    for out in run_ranks(_separate, 2, tiny_model_dir, False):
        assert out["start"]["perf/weight_sync_unverified_params"] == 0
        assert out["start"]["perf/weight_sync_verified_params"] > 10
        assert out["synced"]["perf/weight_sync_unverified_params"] == 0
        msg = out["skipped"]
        assert msg.startswith(
            "weight sync 3 (actor version 2, hf rollout group) did not arrive: the engine's "
        ), msg
        assert "\n" not in msg
        assert isinstance(out["resynced"], dict)


def test_separate_rollout_group_adapter_sync_checked_and_a_skipped_one_stopped(tiny_model_dir):
    out = run_ranks(_separate, 1, tiny_model_dir, True)[0]
    assert out["start"]["perf/weight_sync_unverified_params"] == 0
    assert out["synced"]["perf/weight_sync_verified_params"] == 2 * 2 * 2, "A and B of q and v, 2 layers"
    msg = out["skipped"]
    assert "hf rollout group) did not arrive" in msg and ".lora_" in msg, msg
    assert isinstance(out["resynced"], dict)

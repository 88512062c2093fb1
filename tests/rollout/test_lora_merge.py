"""verl 0.9's model.lora.merge on the HF backend: the actor trains its adapter as always, and every
sync sends the rollout W + alpha/r * B A (rollout/weight_sync.py's MergedSync), a plain model.

Over two FSDP2 ranks: the rollout holds exactly PEFT's own merge of the actor (merge_and_unload) and
no adapter; every check passes after a real sync and stops a sync never made or one that copied
nothing, naming the merged layer; a saved adapter to continue from is merged in before the first
generate. And the merge arithmetic gives a row shard exactly the rows of the whole, which the
trainer side of the check relies on."""

from __future__ import annotations

import torch

from tests.helpers.configs import tiny_model, tiny_rollout
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from tests.rollout.test_weight_check import RESPONSE, _actor, _stopped, skip_copies
from verl_lite.config.schema_model import LoraBlockConfig
from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.engine.lora import lora_layers, merged_state_dict, merged_weight, save_adapter
from verl_lite.rollout.hf_rollout import HFRollout
from verl_lite.rollout.weight_check import SyncCheck
from verl_lite.rollout.weight_sync import MergedSync, RolloutWeights, build_weight_sync

TARGETS = ["q_proj", "v_proj", "down_proj"]


def test_merged_weight_rows_are_exactly_the_rows_of_the_whole():
    g = torch.Generator().manual_seed(0)
    w, b, a = (torch.randn(*s, generator=g) for s in ((37, 53), (37, 8), (8, 53)))
    whole = merged_weight(w, b, a, 2.0)
    assert torch.allclose(whole, w + 2.0 * (b @ a), rtol=1e-5, atol=1e-6)
    for rows in (slice(0, 19), slice(19, 37), slice(5, 6)):  # FSDP2's shards of 37 rows, and one row
        assert torch.equal(merged_weight(w[rows], b[rows], a, 2.0), whole[rows])
    assert merged_weight(w.bfloat16(), b, a, 2.0).dtype == torch.float32, "merged in float32 at least"
    before = w.clone()
    merged_weight(w, b, a, 2.0)
    assert torch.equal(w, before), "W itself (on one rank: the engine's parameter) is left as it is"


def _merged(rank, world, model_dir, adapter_dir):
    merge = LoraBlockConfig(merge=True)
    model_cfg = tiny_model(model_dir, lora_rank=8, lora_alpha=16, target_modules=TARGETS, lora=merge)
    engine, actor = _actor(model_cfg, world)
    rollout = HFRollout(model_cfg, tiny_rollout(seed=3), build_tokenizer(), rank=0)
    sync = build_weight_sync(engine, rollout, bucket_bytes=1 << 16, merge=True)
    check = SyncCheck(engine, rollout, "hf", merged=True)
    batch = make_ppo_batch(vocab=110, bs=8, response_len=RESPONSE, seed=4)
    out = {
        "kind": type(sync).__name__,
        "rollout_lora": [n for n, _ in rollout.model.named_parameters() if "lora_" in n],
        "layers": len(lora_layers(engine.module)),
        "start": check(base=True, sync=0, version=0),  # B = 0: the merged model is the base
    }
    actor.update(batch, mini_size=8, micro_size=4)
    out["stale"] = _stopped(check, base=True, sync=0, version=1)  # the adapter moved, nothing synced
    out["sync_stats"] = sync()
    out["synced"] = _stopped(check, base=True, sync=1, version=1)
    full = dict(engine.iter_full_params())  # collective: every rank
    want = merged_state_dict(full, engine.lora_config, rollout.model.config)
    out["max_diff"] = max(
        (t - want[n]).abs().max().item() for n, t in rollout.model.state_dict().items() if n in want
    )
    out["compared"] = len([n for n in rollout.model.state_dict() if n in want])
    restore = skip_copies(rollout, "update_weights")
    actor.update(batch, mini_size=8, micro_size=4)
    sync()  # gathers and merges, copies nothing
    out["skipped"] = _stopped(check, base=True, sync=2, version=2)
    restore()
    sync()
    out["resynced"] = _stopped(check, base=True, sync=3, version=2)
    bf16 = HFRollout(model_cfg, tiny_rollout(seed=3, dtype="bf16"), build_tokenizer(), rank=0)
    MergedSync(engine, bf16, dtype=torch.bfloat16)()  # merged in fp32, sent in bf16
    out["bf16"] = _stopped(
        SyncCheck(engine, bf16, "hf", sent_dtype=torch.bfloat16, merged=True), base=True, sync=1, version=2
    )
    if rank == 0:  # the trained adapter, saved as a checkpoint's lora_adapter is
        from verl_lite.engine.lora import adapter_file_state

        state = adapter_file_state(engine.module, [(n, t) for n, t in full.items() if "lora_" in n])
        save_adapter(adapter_dir, state, engine.lora_config)
    return out


def _from_saved(rank, world, model_dir, adapter_dir):
    """A run continuing from a saved adapter (lora_adapter_path) with lora.merge: the rollout, loaded
    from the base folder, must be synced before its first generate."""
    model_cfg = tiny_model(model_dir, lora_adapter_path=adapter_dir, lora=LoraBlockConfig(merge=True))
    engine, _ = _actor(model_cfg, world)
    rollout = HFRollout(model_cfg, tiny_rollout(seed=3), build_tokenizer(), rank=0)
    sync = MergedSync(engine, rollout)
    check = SyncCheck(engine, rollout, "hf", merged=True)
    weights = RolloutWeights(rollout, starts_synced=False)
    out = {"due": weights.sync_due(), "unsynced": _stopped(check, base=True, sync=0, version=0)}
    sync()
    weights.synced()
    out["after"] = (weights.sync_due(), _stopped(check, base=True, sync=1, version=0))
    return out


def test_hf_merged_sync_is_peft_merge_checked_and_a_skipped_one_stopped(tiny_model_dir, tmp_path):
    adapter = str(tmp_path / "adapter")
    for out in run_ranks(_merged, 2, tiny_model_dir, adapter):
        assert out["kind"] == "MergedSync" and out["rollout_lora"] == [], "a plain model, no adapter"
        assert out["layers"] == 3 * 2, "q, v and down of both layers"
        assert out["start"]["perf/weight_sync_unverified_params"] == 0
        assert out["start"]["perf/weight_sync_verified_params"] > 10
        assert "did not arrive" in out["stale"], "an update never synced is caught"
        assert out["synced"] == "" and out["resynced"] == "" and out["bf16"] == ""
        assert out["compared"] > 10 and out["max_diff"] < 1e-6, out["max_diff"]  # PEFT's merge (a matmul)
        msg = out["skipped"]
        assert "did not arrive" in msg and "\n" not in msg, msg
        assert any(f"{t}.weight" in msg for t in TARGETS), f"a merged layer is named: {msg}"
    for out in run_ranks(_from_saved, 2, tiny_model_dir, adapter):
        assert out["due"], "the rollout holds the base, not base + the saved adapter: sync first"
        assert "did not arrive" in out["unsynced"]
        assert out["after"] == (False, "")

"""Tensor-parallel vLLM rollout on CPU, for real: 2 gloo ranks, one TP=2 engine, against TP=1.

Each rank holds an FSDP2 actor and the vLLM engine in one process, as a worker does. The ranks get
different (and differently sized) prompt chunks, as the worker group dispatches them; with TP=2 the
two ranks gather them, run one engine and each keeps its own rows. The same prompts and seeds run
with TP=1 (an engine per rank) must give the same answers, and both must sample from the actor's
weights (the rollout/actor log-prob diff, after a full-tensor weight sync that vLLM shards). The TP=2
engine starts where a killed TP=2 run left its shared memory (the names are the same in every run).
"""

import os

import pytest
import torch
import torch.distributed as dist

from tests.helpers.dist import run_ranks
from tests.helpers.tp_lock import tp_engine_lock
from verl_lite.rollout import cpu_shm
from verl_lite.rollout.tp_group import TPGroup

PROMPT_LEN, RESPONSE_LEN = 16, 8
CHUNKS = (((3, 4), (25, 17), (60, 31)), ((8, 80),))  # rank 0's prompts, rank 1's


def _gather(rank, world):
    group = TPGroup(2)
    rows = 3 if rank == 0 else 1
    ids = torch.arange(rows * 4).reshape(rows, 4) + 100 * rank
    batch = group.gather(ids, torch.ones_like(ids))
    return batch.prompt_ids, batch.origins, batch.own_rows


def test_gather_concatenates_uneven_chunks_in_rank_order():
    (ids0, origins0, own0), (ids1, origins1, own1) = run_ranks(_gather, 2)
    assert torch.equal(ids0, ids1) and origins0 == origins1 == [(0, 0), (0, 1), (0, 2), (1, 0)]
    assert torch.equal(ids0[3], torch.arange(4) + 100) and (own0, own1) == (slice(0, 3), slice(3, 4))


def test_tp_size_must_divide_the_world():
    assert not dist.is_initialized(), "a world of one: this process has no group"
    with pytest.raises(ValueError, match="tensor_model_parallel_size=3 must divide the 1 workers"):
        TPGroup(3)


def _rollout(rank, world, tp):
    """A worker's view: FSDP2 actor, then the engine; sampled and greedy answers and the log-prob diff."""
    from torch.distributed.device_mesh import init_device_mesh

    from tests.helpers.configs import fp32_fsdp, tiny_model, tiny_rollout
    from tests.rollout.test_vllm_rollout import logprob_diff, prompts
    from verl_lite.config.schema import TINY_MODEL, OptimConfig
    from verl_lite.data import assets
    from verl_lite.engine.fsdp_engine import FSDPEngine
    from verl_lite.rollout.base import SamplingParams, assemble, place_log_probs
    from verl_lite.rollout.vllm_rollout import VLLMRollout
    from verl_lite.utils.hf_model import load_tokenizer

    os.environ["LOCAL_RANK"] = "0"  # one process per "node" as far as vLLM's CPU worker is concerned
    model_cfg = tiny_model(assets.resolve(TINY_MODEL))
    tok = load_tokenizer(model_cfg.path)
    mesh = init_device_mesh("cpu", (world,))
    actor = FSDPEngine(
        model_cfg, fp32_fsdp(), mesh, role="actor", optim_cfg=OptimConfig(lr=1e-2), grad_clip=1.0
    )
    cfg = tiny_rollout(
        seed=3, cpu_kv_cache_gb=0.25, max_model_len=PROMPT_LEN + RESPONSE_LEN, tensor_model_parallel_size=tp
    )
    rollout = VLLMRollout(model_cfg, cfg, tok, rank=rank)
    rollout.update_weights(actor.iter_full_params())
    ids, mask, pos = prompts(tok, CHUNKS[rank])
    sampled = SamplingParams(n=2, temperature=1.0, response_length=RESPONSE_LEN)
    raw, raw_logp = rollout.generate_tokens(ids, mask, sampled)
    batch = assemble(ids, mask, pos, raw, 2, RESPONSE_LEN, tok.eos_token_id, tok.pad_token_id)
    batch["rollout_log_probs"] = place_log_probs(raw_logp, batch["response_mask"])
    greedy, _ = rollout.generate_tokens(
        ids, mask, SamplingParams(n=1, do_sample=False, response_length=RESPONSE_LEN)
    )
    engine_tp = rollout.llm.llm_engine.vllm_config.parallel_config.tensor_parallel_size
    result = {
        "responses": batch["responses"],
        "rollout_log_probs": batch["rollout_log_probs"],
        "mask": batch["response_mask"],
        "greedy": greedy,
        "diff": logprob_diff(actor, batch),
        "engine_tp": engine_tp,
        "direct_reload": rollout.direct_reload,
    }
    dist.barrier()  # no rank tears down the engine's groups while another still uses them
    return result


def plant_a_killed_runs_shared_memory() -> list[str]:
    """What a TP=2 run killed on this machine leaves behind (rollout/cpu_shm.py): its ranks' segments,
    under the names the next TP=2 run's ranks will create."""
    planted = []
    for rank in range(2):
        path = os.path.join(cpu_shm.SHM_DIR, f"-tp:0-[0-1]-cpushm_{rank}")
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            continue  # already there (left by a killed run, or a live run's: the TP=2 run says which)
        planted.append(path)
    return planted


@pytest.fixture(scope="module")
def runs():
    pytest.importorskip("vllm", reason="the vLLM rollout needs vllm (make install)")
    results = {1: run_ranks(_rollout, 2, 1, timeout_s=600)}
    with tp_engine_lock():  # no other TP engine of the suite runs meanwhile (tests/helpers/tp_lock.py)
        if os.path.isdir(cpu_shm.SHM_DIR):
            plant_a_killed_runs_shared_memory()  # the TP=2 engine must start anyway
        results[2] = run_ranks(_rollout, 2, 2, timeout_s=600)
    return results


def test_tp2_generates_what_tp1_generates(runs):
    for rank in range(2):
        one, two = runs[1][rank], runs[2][rank]
        assert (one["engine_tp"], two["engine_tp"]) == (1, 2), "the engine really ran tensor-parallel"
        assert one["responses"].shape[0] == 2 * len(CHUNKS[rank]), "each rank keeps its own rows"
        assert torch.equal(one["greedy"], two["greedy"])
        # same per-request seeds on both layouts: the same samples, up to TP's summation-order noise
        assert torch.equal(one["responses"], two["responses"])
        assert torch.allclose(one["rollout_log_probs"], two["rollout_log_probs"], atol=1e-4)
    assert not torch.equal(runs[2][0]["greedy"][:1], runs[2][1]["greedy"][:1]), (
        "ranks answered different prompts"
    )


def test_tp2_samples_from_the_actor_weights(runs):
    """Every rank synced full tensors; vLLM kept its TP slice of each: log-probs match the actor's."""
    for rank in range(2):
        diff = runs[2][rank]["diff"]
        assert diff["rollout/actor_logprob_abs_diff_max"] < 1e-4, diff
        assert runs[2][rank]["direct_reload"], "each rank loads its TP slice by the direct path"

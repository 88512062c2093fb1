"""The vLLM rollout on CPU, for real: one engine for the whole module, beside an FSDP2 actor.

As in a worker, a (1-rank) gloo group and the FSDP2 engine come first, then the vLLM engine joins
that group (external launcher). The model is the embedded warm-started arithmetic model, so greedy
answers end in EOS and the EOS/padding layout is exercised. The weight-sync checks compare vLLM's
sampled-token log-probs with the actor's recomputed ones: small after a sync, large when the sync is
skipped after an update (the check can fail). The sampling checks load a random-init policy (where a
truncation shows) and hold vLLM's samples and log-probs to the configured distribution.
"""

import datetime
import gc
import os

import pytest
import torch
import torch.distributed as dist

pytest.importorskip("vllm", reason="the vLLM rollout needs vllm (make install)")

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402

from tests.helpers.configs import fp32_fsdp, tiny_model, tiny_rollout  # noqa: E402
from tests.helpers.dist import free_port  # noqa: E402
from tests.helpers.sampling import (  # noqa: E402
    SAMPLING_CASES,
    assert_log_probs_match,
    mass_outside_top,
    reference_probs,
    total_variation,
)
from verl_lite.config.schema import TINY_MODEL, OptimConfig  # noqa: E402
from verl_lite.data import assets  # noqa: E402
from verl_lite.engine.fsdp_engine import FSDPEngine  # noqa: E402
from verl_lite.rollout.base import SamplingParams, assemble, compute_logprob_diff_metrics, place_log_probs  # noqa: E402
from verl_lite.utils.hf_model import load_tokenizer  # noqa: E402
from verl_lite.workers.actor import compute_log_prob  # noqa: E402

PROMPT_LEN, RESPONSE_LEN = 16, 8


@pytest.fixture(scope="module")
def hybrid():
    """(actor engine, vLLM rollout, tokenizer) sharing one process and one gloo group."""
    from verl_lite.rollout.vllm_rollout import VLLMRollout

    saved_env = dict(os.environ)
    os.environ.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())
    )
    dist.init_process_group("gloo", rank=0, world_size=1, timeout=datetime.timedelta(seconds=120))
    model_cfg = tiny_model(assets.resolve(TINY_MODEL))
    tokenizer = load_tokenizer(model_cfg.path)
    mesh = init_device_mesh("cpu", (1,))
    actor = FSDPEngine(
        model_cfg, fp32_fsdp(), mesh, role="actor", optim_cfg=OptimConfig(lr=1e-2), grad_clip=1.0
    )
    rollout_cfg = tiny_rollout(seed=3, cpu_kv_cache_gb=0.25, max_model_len=PROMPT_LEN + RESPONSE_LEN)
    rollout = VLLMRollout(model_cfg, rollout_cfg, tokenizer, rank=0)
    assert not rollout.weights_loaded, "load_format=dummy: no weights before the first sync"
    stats = rollout.update_weights(actor.iter_full_params())
    assert stats["update_weights_gb"] > 0 and stats["update_weights_buckets"] >= 1
    yield actor, rollout, tokenizer
    del rollout.llm  # vLLM's shutdown destroys its groups and the default one (the trainer never does this)
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()
    os.environ.clear()  # later tests in this process see the environment they would have seen
    os.environ.update(saved_env)


def prompts(tokenizer, pairs=((3, 4), (25, 17), (60, 31), (8, 80))):
    """Chat-templated arithmetic prompts, left-padded to PROMPT_LEN as the dataset does."""
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"{a}+{b}="}], add_generation_prompt=True, tokenize=False
        )
        for a, b in pairs
    ]
    rows = [tokenizer(t)["input_ids"] for t in texts]
    ids = torch.full((len(rows), PROMPT_LEN), tokenizer.pad_token_id)
    mask = torch.zeros((len(rows), PROMPT_LEN), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, PROMPT_LEN - len(row) :] = torch.tensor(row)
        mask[i, PROMPT_LEN - len(row) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, pos


def rollout_batch(rollout, tokenizer, params):
    ids, mask, pos = prompts(tokenizer)
    raw, raw_logp = rollout.generate_tokens(ids, mask, params)
    batch = assemble(
        ids,
        mask,
        pos,
        raw,
        params.n,
        params.response_length,
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
        stop_at_eos=not params.ignore_eos,
    )
    batch["rollout_log_probs"] = place_log_probs(raw_logp, batch["response_mask"])
    return raw, batch


def logprob_diff(actor, batch) -> dict[str, float]:
    actor_logp = compute_log_prob(
        actor, batch, micro_size=64, max_token_len=None, temperature=1.0, phase="lp"
    )
    return compute_logprob_diff_metrics(batch["rollout_log_probs"], actor_logp, batch["response_mask"])


def test_shapes_masks_eos_and_padding(hybrid):
    _, rollout, tok = hybrid
    raw, batch = rollout_batch(
        rollout, tok, SamplingParams(n=3, temperature=1.0, response_length=RESPONSE_LEN)
    )
    assert raw.shape[0] == 12 and raw.shape[1] <= RESPONSE_LEN
    assert batch["responses"].shape == (12, RESPONSE_LEN) and batch["input_ids"].shape == (
        12,
        PROMPT_LEN + RESPONSE_LEN,
    )
    mask, responses, logp = batch["response_mask"], batch["responses"], batch["rollout_log_probs"]
    lengths = mask.sum(-1)
    ended = (responses == tok.eos_token_id).any(-1)
    assert ended.sum() >= 6, "the warm-started model answers and stops: most samples end in EOS"
    for row in torch.nonzero(ended).flatten().tolist():
        last = lengths[row] - 1
        assert responses[row, last] == tok.eos_token_id, "the mask ends with the first EOS, inclusive"
        assert (responses[row, last + 1 :] == tok.pad_token_id).all()
    assert (logp[mask.bool()] <= 0).all() and (logp[~mask.bool()] == 0).all()
    assert torch.equal(batch["prompts"][0], batch["prompts"][2]), "each prompt's n samples are adjacent"


def test_ignore_eos_fills_the_response_length(hybrid):
    _, rollout, tok = hybrid
    raw, batch = rollout_batch(
        rollout, tok, SamplingParams(n=1, response_length=RESPONSE_LEN, ignore_eos=True)
    )
    assert raw.shape == (4, RESPONSE_LEN) and bool(batch["response_mask"].all())


def test_greedy_matches_hf_generate(hybrid):
    """vLLM's greedy answers equal transformers' greedy answers on the same weights."""
    from verl_lite.rollout.hf_rollout import HFRollout

    _, rollout, tok = hybrid
    greedy = SamplingParams(n=2, do_sample=False, response_length=RESPONSE_LEN)
    ids, mask, _ = prompts(tok)
    hf = HFRollout(tiny_model(assets.resolve(TINY_MODEL)), tiny_rollout(), tok, rank=0)
    hf_tokens, _ = hf.generate_tokens(ids, mask, greedy)
    vllm_tokens, _ = rollout.generate_tokens(ids, mask, greedy)
    eos, pad = tok.eos_token_id, tok.pad_token_id
    hf_batch = assemble(ids, mask, mask, hf_tokens, 2, RESPONSE_LEN, eos, pad)
    vllm_batch = assemble(ids, mask, mask, vllm_tokens, 2, RESPONSE_LEN, eos, pad)
    assert torch.equal(hf_batch["responses"], vllm_batch["responses"])


def test_same_seed_and_call_give_the_same_tokens_and_spare_the_training_rng(hybrid):
    _, rollout, tok = hybrid
    params = SamplingParams(n=4, temperature=1.0, response_length=RESPONSE_LEN)
    ids, mask, _ = prompts(tok)
    start = rollout.num_calls
    state = torch.random.get_rng_state()
    first, first_logp = rollout.generate_tokens(ids, mask, params)
    assert torch.equal(torch.random.get_rng_state(), state), "rollout must not consume the training RNG"
    rollout.num_calls = start  # the same (seed, rank, call): the same requests' seeds
    again, again_logp = rollout.generate_tokens(ids, mask, params)
    assert torch.equal(first, again) and torch.equal(first_logp, again_logp)
    assert not torch.equal(rollout.generate_tokens(ids, mask, params)[0], first), "the next call samples anew"
    torch.set_num_threads(1)  # vLLM replaced the setter by a no-op; the rollout put it back
    assert torch.set_num_threads.__name__ != "skip_set_num_threads"


def _train_one_step(actor, batch):
    """One optimizer step that moves the policy: raise the log-prob of the sampled tokens."""
    from verl_lite.engine.forward import TokenRequest

    def loss_fn(output, micro, scale):
        mask = micro["response_mask"].float()
        return -(output.tokens["log_probs"] * mask).sum() / scale.num_tokens, {}

    keys = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")
    rows = len(batch["responses"])
    request = TokenRequest(temperature=1.0)
    actor.update({k: batch[k] for k in keys}, loss_fn, mini_size=rows, micro_size=rows, request=request)


def test_logprob_diff_small_after_sync_and_large_when_the_sync_is_skipped(hybrid):
    actor, rollout, tok = hybrid
    params = SamplingParams(n=4, temperature=1.0, response_length=RESPONSE_LEN)
    _, batch = rollout_batch(rollout, tok, params)
    synced = logprob_diff(actor, batch)
    assert synced["rollout/actor_logprob_abs_diff_max"] < 1e-4, synced

    _train_one_step(
        actor, batch
    )  # the actor moves on; the engine (and its prefix cache) still hold the old policy
    _, stale_batch = rollout_batch(rollout, tok, params)
    stale = logprob_diff(actor, stale_batch)
    assert stale["rollout/actor_logprob_abs_diff_max"] > 1e-2, stale

    rollout.update_weights(actor.iter_full_params())  # same prompts: a stale prefix cache would show here
    _, fresh_batch = rollout_batch(rollout, tok, params)
    fresh = logprob_diff(actor, fresh_batch)
    assert fresh["rollout/actor_logprob_abs_diff_max"] < 1e-4, fresh


def test_consecutive_syncs_each_serve_their_own_weights(hybrid, random_policy):
    """Syncs alternate between two different policies (the random one, the actor, the random one):
    after each, vLLM samples with exactly the weights just sent. A kernel left packed from an
    earlier sync (vllm_reload.py re-packs every CPU GEMM layer) would show as a large diff."""
    actor, _, tok = hybrid
    policy, rollout = random_policy
    params = SamplingParams(n=4, temperature=1.0, response_length=RESPONSE_LEN)
    for sent, other in ((policy, actor), (actor, policy), (policy, actor)):
        rollout.update_weights(sent.iter_full_params())
        assert rollout.direct_reload, "the CPU engine takes the direct path (no layer-wise reload)"
        _, batch = rollout_batch(rollout, tok, params)
        same = logprob_diff(sent, batch)["rollout/actor_logprob_abs_diff_max"]
        assert same < 1e-4, same
        assert logprob_diff(other, batch)["rollout/actor_logprob_abs_diff_max"] > 1e-2


def _dropped_weights(worker) -> list[str]:
    return sorted(n for n, p in worker.model_runner.get_model().named_parameters() if p.numel() == 0)


def test_direct_sync_leaves_the_engine_as_vllms_reload_does(hybrid):
    """The same weights loaded by the direct path and by vLLM's own layer-wise `reload_weights`: the
    same seeded samples and bitwise the same log-probs, and the dropped weights dropped again."""
    from verl_lite.rollout.vllm_rollout import with_tied_lm_head

    actor, rollout, tok = hybrid
    params = SamplingParams(n=4, temperature=1.0, response_length=RESPONSE_LEN)
    state = rollout.state_dict()
    rollout.update_weights(actor.iter_full_params())
    assert rollout.direct_reload
    direct = rollout_batch(rollout, tok, params)
    dropped = rollout.llm.collective_rpc(_dropped_weights)[0]
    assert dropped, "the CPU GEMM layers keep only their packed kernels"
    rollout.load_state_dict(state)
    weights = with_tied_lm_head(actor.iter_full_params())
    rollout.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
    rollout.llm.reset_prefix_cache()
    reloaded = rollout_batch(rollout, tok, params)
    assert torch.equal(direct[0], reloaded[0])
    assert torch.equal(direct[1]["rollout_log_probs"], reloaded[1]["rollout_log_probs"])
    assert rollout.llm.collective_rpc(_dropped_weights)[0] == dropped


def test_sampling_state_round_trips_and_validation_draws_apart(hybrid):
    _, rollout, tok = hybrid
    params = SamplingParams(n=2, temperature=1.0, response_length=RESPONSE_LEN)
    ids, mask, _ = prompts(tok)
    state = rollout.state_dict()
    first, _ = rollout.generate_tokens(ids, mask, params)
    rollout.load_state_dict(state)  # what a resume does with the checkpointed counters
    sampled_val = SamplingParams(n=2, temperature=1.0, response_length=RESPONSE_LEN, validate=True)
    rollout.generate_tokens(ids, mask, sampled_val)  # a validation between two training rollouts
    again, _ = rollout.generate_tokens(ids, mask, params)
    assert torch.equal(first, again), "validation must not move the training stream"
    assert rollout.state_dict()["num_val_calls"] == state["num_val_calls"] + 1


def test_every_sync_is_checked_and_one_whose_copy_does_nothing_is_stopped(hybrid, monkeypatch):
    """rollout/weight_check.py on vLLM's own layout: fused qkv/gate_up, the tied head, packed CPU
    GEMM layers (their fingerprint kept when the weight was dropped) all pair with the actor's
    weights after a real sync; a sync whose load into the engine does nothing is stopped."""
    from tests.rollout.test_weight_check import _stopped
    from verl_lite.rollout import vllm_rollout
    from verl_lite.rollout.weight_check import SyncCheck

    actor, rollout, tok = hybrid
    check = SyncCheck(actor, rollout, "vllm")
    rollout.update_weights(actor.iter_full_params())
    stats = check(base=True, sync=1, version=0)
    assert (
        stats["perf/weight_sync_unverified_params"] == 0 and stats["perf/weight_sync_verified_params"] > 10
    ), stats
    _, batch = rollout_batch(rollout, tok, SamplingParams(n=2, temperature=1.0, response_length=RESPONSE_LEN))
    _train_one_step(actor, batch)
    with monkeypatch.context() as patch:  # the engine's load step walks the tensors and loads none
        patch.setattr(vllm_rollout, "reload_weights", lambda worker, weights: [*weights] and True)
        rollout.update_weights(actor.iter_full_params())
    msg = _stopped(check, base=True, sync=2, version=1)
    assert msg.startswith("weight sync 2 (actor version 1, vllm rollout) did not arrive: the engine's "), msg
    rollout.update_weights(actor.iter_full_params())
    assert _stopped(check, base=True, sync=3, version=1) == ""


# --- sampling exactly as configured ---------------------------------------------------------------


@pytest.fixture(scope="module")
def random_model_dir(tmp_path_factory):
    from tests.helpers.models import make_random_model_like

    return make_random_model_like(assets.resolve(TINY_MODEL), str(tmp_path_factory.mktemp("random")), seed=1)


@pytest.fixture()
def random_policy(hybrid, random_model_dir):
    """The engine running a random-init policy of the same architecture (near-uniform next-token
    distributions, where truncation shows), held by an FSDP2 engine of its own as the actor; the
    module's actor weights are synced back afterwards."""
    actor, rollout, _ = hybrid
    policy = FSDPEngine(tiny_model(random_model_dir), fp32_fsdp(), actor.mesh, role="ref")
    rollout.update_weights(policy.iter_full_params())
    yield policy, rollout
    rollout.update_weights(actor.iter_full_params())


def _policy_logits(policy, prompt: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """The policy's logits (rows, R, V) that score each of `responses`' tokens after `prompt`
    (unpadded rows; causal, so those for token t see only the prompt and tokens before t)."""
    ids = torch.cat([prompt, responses], -1)
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "position_ids": torch.arange(ids.shape[1]).expand_as(ids),
        "responses": responses,
    }
    head = lambda output, micro: output.logits[:, -micro.width - 1 : -1].float()  # noqa: E731
    return policy.forward(batch, head, micro_size=len(ids), phase="logits")


PROMPT = torch.tensor([[5, 17, 23, 9, 41, 3]])


@pytest.mark.parametrize("case", SAMPLING_CASES)
def test_sampled_log_probs_are_the_configured_distribution(random_policy, case):
    """At every response position, each sampled token lies in the configured support and vLLM's
    (processed) log-prob of it is the reference distribution's: softmax(actor logits / T) truncated
    as configured."""
    policy, rollout = random_policy
    temperature, top_k, top_p = case
    params = SamplingParams(
        n=16, temperature=temperature, top_k=top_k, top_p=top_p, response_length=6, ignore_eos=True
    )
    tokens, log_probs = rollout.generate_tokens(PROMPT, torch.ones_like(PROMPT), params)
    assert tokens.shape == log_probs.shape == (16, 6)
    logits = _policy_logits(policy, PROMPT.repeat(16, 1), tokens)
    assert_log_probs_match(logits, tokens, log_probs, case)


def test_empirical_sampling_matches_the_configured_distribution(random_policy):
    """Thousands of draws of one token: their frequencies match the reference distribution for
    each case; with verl's defaults nothing is cut (a top-50 would cut the mass checked below)."""
    policy, rollout = random_policy
    logits = _policy_logits(policy, PROMPT, torch.zeros_like(PROMPT[:, :1]))[0, 0]
    num_draws, tolerance = 6000, 0.08  # expected distance of an exact sampler here: ~0.05
    assert mass_outside_top(reference_probs(logits, 1.0, -1, 1.0), 50) > 3 * tolerance
    for case in SAMPLING_CASES:
        params = SamplingParams(
            n=num_draws, temperature=case[0], top_k=case[1], top_p=case[2], response_length=1
        )
        tokens, _ = rollout.generate_tokens(PROMPT, torch.ones_like(PROMPT), params)
        distance = total_variation(tokens[:, 0], reference_probs(logits, *case))
        assert distance < tolerance, (
            f"{case}: sampled frequencies are {distance:.3f} from the configured distribution"
        )

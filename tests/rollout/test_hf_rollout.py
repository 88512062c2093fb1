"""The HF rollout: n samples per prompt, seeded sampling, greedy decoding, weight sync, and sampling
exactly as configured (the distribution and log-probs of the sampled tokens against the actor's)."""

import pytest
import torch

from tests.helpers.configs import tiny_model, tiny_rollout
from tests.helpers.sampling import (
    SAMPLING_CASES,
    assert_log_probs_match,
    mass_outside_top,
    reference_probs,
    total_variation,
)
from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.rollout.base import SamplingParams
from verl_lite.rollout.hf_rollout import HFRollout, SampledTokenLogProbs


@pytest.fixture()
def rollout(tiny_model_dir):
    return HFRollout(tiny_model(tiny_model_dir), tiny_rollout(seed=3), build_tokenizer(), rank=0)


def prompts():
    ids = torch.tensor([[0, 0, 1, 5, 6], [1, 7, 8, 9, 10]])
    return ids, (ids != 0).long()


def test_sampling_shapes_and_seeded_reproducibility(rollout, tiny_model_dir):
    params = SamplingParams(n=3, temperature=1.0, response_length=6)
    first, _ = rollout.generate_tokens(*prompts(), params)
    assert first.shape[0] == 6 and first.shape[1] <= 6
    other = HFRollout(tiny_model(tiny_model_dir), tiny_rollout(seed=3), build_tokenizer(), rank=0)
    assert torch.equal(other.generate_tokens(*prompts(), params)[0], first), (
        "same seed, rank and call: same samples"
    )
    assert not torch.equal(rollout.generate_tokens(*prompts(), params)[0], first), (
        "the next call draws new samples"
    )
    state = torch.random.get_rng_state()
    rollout.generate_tokens(*prompts(), params)
    assert torch.equal(torch.random.get_rng_state(), state), "rollout must not consume the training RNG"


def test_greedy_is_deterministic_and_identical_across_n(rollout):
    out, _ = rollout.generate_tokens(*prompts(), SamplingParams(n=2, do_sample=False, response_length=5))
    assert torch.equal(out[0], out[1]) and torch.equal(out[2], out[3])


def test_update_weights_changes_generation(rollout):
    greedy = SamplingParams(n=1, do_sample=False, response_length=5)
    before, _ = rollout.generate_tokens(*prompts(), greedy)
    head = dict(rollout.model.named_parameters())["model.embed_tokens.weight"]
    new = {name: torch.randn_like(p) for name, p in rollout.model.named_parameters()}
    stats = rollout.update_weights(iter(new.items()))
    assert torch.equal(head, new["model.embed_tokens.weight"])
    assert stats["update_weights_gb"] > 0
    assert not torch.equal(rollout.generate_tokens(*prompts(), greedy)[0], before)


def test_ignore_eos_runs_to_response_length():
    """The warm-started model answers in a few tokens and stops at EOS, which its
    generation_config.json names; ignore_eos must still run every sample to the end."""
    from verl_lite.config.schema import TINY_MODEL
    from verl_lite.data import assets
    from verl_lite.utils.hf_model import load_tokenizer

    path = assets.resolve(TINY_MODEL)
    tok = load_tokenizer(path)
    rollout = HFRollout(tiny_model(path), tiny_rollout(seed=3), tok, rank=0)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "3+4="}], add_generation_prompt=True, tokenize=False
    )
    ids = torch.tensor([tok(text)["input_ids"]])
    mask = torch.ones_like(ids)
    stopped, _ = rollout.generate_tokens(ids, mask, SamplingParams(n=4, response_length=12))
    assert stopped.shape[1] < 12, "without ignore_eos the answers end early"
    out, _ = rollout.generate_tokens(ids, mask, SamplingParams(n=4, response_length=12, ignore_eos=True))
    assert out.shape == (4, 12)


def test_sampling_state_round_trips_and_validation_draws_apart(rollout):
    params = SamplingParams(n=2, temperature=1.0, response_length=6)
    state = rollout.state_dict()
    first, _ = rollout.generate_tokens(*prompts(), params)
    rollout.load_state_dict(state)  # what a resume does with the checkpointed counters
    sampled_val = SamplingParams(n=2, temperature=1.0, response_length=6, validate=True)
    rollout.generate_tokens(*prompts(), sampled_val)  # a validation between two training rollouts
    again, _ = rollout.generate_tokens(*prompts(), params)
    assert torch.equal(first, again), "validation must not move the training stream"
    assert rollout.state_dict() == {"num_calls": 1, "num_val_calls": 1}


# --- sampling exactly as configured ---------------------------------------------------------------


@pytest.fixture(scope="module")
def misleading_model_dir(tmp_path_factory):
    """A random tiny model (near-uniform next-token distributions over 115 tokens) whose folder's
    generation_config.json asks for other sampling than the rollout config: it must be ignored."""
    import json
    import os

    from tests.helpers.models import make_tiny_model_dir

    path = make_tiny_model_dir(str(tmp_path_factory.mktemp("misleading_model")), seed=1)
    misleading = {"top_k": 3, "top_p": 0.5, "temperature": 0.3, "repetition_penalty": 2.0, "do_sample": True}
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump(misleading, f)
    return path


def _rollout_and_actor(path):
    from verl_lite.utils.hf_model import load_causal_lm

    model_cfg = tiny_model(path)
    rollout = HFRollout(model_cfg, tiny_rollout(seed=5), build_tokenizer(), rank=0)
    return rollout, load_causal_lm(model_cfg, torch.float32).eval()  # the actor's weights and logits


@pytest.mark.parametrize("case", SAMPLING_CASES)
def test_sampled_log_probs_are_the_configured_distribution(misleading_model_dir, case):
    """At every response position, each sampled token lies in the configured support and the
    rollout's log-prob of it is the reference distribution's (softmax(actor logits / T) truncated
    as configured): no warper beyond the config, none from the model folder."""
    rollout, actor = _rollout_and_actor(misleading_model_dir)
    temperature, top_k, top_p = case
    prompt = torch.tensor([[1, 7, 8, 9, 10]])
    params = SamplingParams(
        n=16, temperature=temperature, top_k=top_k, top_p=top_p, response_length=6, ignore_eos=True
    )
    tokens, log_probs = rollout.generate_tokens(prompt, torch.ones_like(prompt), params)
    assert tokens.shape == log_probs.shape == (16, 6)
    with torch.no_grad():
        full = torch.cat([prompt.repeat(16, 1), tokens], dim=-1)
        logits = actor(input_ids=full).logits[:, prompt.shape[1] - 1 : -1]  # (16, 6, V)
    assert_log_probs_match(logits, tokens, log_probs, case)


def test_empirical_sampling_matches_the_configured_distribution(misleading_model_dir):
    """Thousands of draws of one token: their frequencies match the reference distribution for
    each case. With verl's defaults the reference keeps every token; a hidden top-50 (transformers'
    default) would cut the mass checked below, many times the tolerance."""
    rollout, actor = _rollout_and_actor(misleading_model_dir)
    prompt = torch.tensor([[1, 7, 8, 9, 10]])
    with torch.no_grad():
        logits = actor(input_ids=prompt).logits[0, -1]
    num_draws, tolerance = 6000, 0.08  # expected distance of an exact sampler here: ~0.05
    assert mass_outside_top(reference_probs(logits, 1.0, -1, 1.0), 50) > 3 * tolerance
    for case in SAMPLING_CASES:
        params = SamplingParams(
            n=num_draws, temperature=case[0], top_k=case[1], top_p=case[2], response_length=1
        )
        tokens, _ = rollout.generate_tokens(prompt, torch.ones_like(prompt), params)
        distance = total_variation(tokens[:, 0], reference_probs(logits, *case))
        assert distance < tolerance, (
            f"{case}: sampled frequencies are {distance:.3f} from the configured distribution"
        )


def test_untruncated_sampling_log_probs_equal_the_actors_and_truncation_shows(misleading_model_dir):
    """What the trainer's rollout/actor_logprob_abs_diff_* metric sees: ~0 for verl's default
    sampling (the actor scores the same distribution), large when top_k truncates."""
    from verl_lite.rollout.base import compute_logprob_diff_metrics

    rollout, actor = _rollout_and_actor(misleading_model_dir)
    prompt = torch.tensor([[1, 7, 8, 9, 10]])
    diffs = {}
    for top_k in (-1, 5):
        params = SamplingParams(n=8, top_k=top_k, response_length=6, ignore_eos=True)
        tokens, log_probs = rollout.generate_tokens(prompt, torch.ones_like(prompt), params)
        with torch.no_grad():
            logits = actor(input_ids=torch.cat([prompt.repeat(8, 1), tokens], -1)).logits[:, 4:-1]
        actor_log_probs = torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        metrics = compute_logprob_diff_metrics(log_probs, actor_log_probs, torch.ones_like(tokens))
        diffs[top_k] = metrics["rollout/actor_logprob_abs_diff_max"]
    assert diffs[-1] < 1e-4 and diffs[5] > 1e-1, diffs


def test_log_probs_are_zero_after_eos(rollout):
    """Rows that finished early continue with padding; their log-probs there are 0, not -inf/NaN."""
    tokens, log_probs = rollout.generate_tokens(*prompts(), SamplingParams(n=8, response_length=12))
    from verl_lite.rollout.base import response_mask_from_tokens

    mask = response_mask_from_tokens(tokens, build_tokenizer().eos_token_id).bool()
    assert torch.isfinite(log_probs).all()
    assert (log_probs[~mask] == 0).all() and (log_probs[mask] < 0).all()


def test_sampled_token_log_probs_stay_on_the_device_until_the_rollout_ends():
    """Decode steps never copy to the host: on the meta device (which has no data to copy) the
    recorder takes every step's log-prob; the one copy to the host is the caller's `finish`."""
    recorder = SampledTokenLogProbs()
    scores = torch.empty(3, 11, device="meta")
    for step in range(4):
        recorder(torch.zeros(3, 5 + step, dtype=torch.long, device="meta"), scores)
    assert len(recorder.steps) == 3 and all(s.device.type == "meta" for s in recorder.steps)
    host = SampledTokenLogProbs()
    logits = torch.randn(2, 11)
    host(torch.zeros(2, 1, dtype=torch.long), logits)
    out = host.finish(torch.tensor([4, 7]))
    expected = torch.log_softmax(logits, -1)[[0, 1], [4, 7]]
    assert out.shape == (2, 1) and torch.equal(out[:, 0], expected)


def _requests(params, prompts_, first_key=0):
    from verl_lite.rollout.base import TokenRequest

    return [
        TokenRequest(tuple(p), params.response_length, params, (first_key + i, 1))
        for i, p in enumerate(prompts_)
    ]


def test_a_multi_turn_request_samples_the_same_tokens_whatever_its_batch_mates(rollout):
    """Each request draws from its own generator (seed, rank, call, key): alone, with other
    requests of other lengths (a wider left padding), or placed elsewhere in the call, it samples
    the same tokens; the log-probs differ only by the padding's float rounding (docs/multi_turn.md)."""
    params = SamplingParams(n=1, temperature=1.0, response_length=12, ignore_eos=True)
    mine = _requests(params, [[1, 7, 8, 9, 10]], first_key=3)[0]
    mates = _requests(params, [[1, 2], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], [20, 21, 22]])
    alone, _ = rollout.generate_requests([mine], (1,))
    state = torch.random.get_rng_state()
    for batch in ([*mates, mine], [mine, mates[1]], [mates[0], mine, mates[2]]):
        results, active = rollout.generate_requests(batch, (1,))
        result = results[batch.index(mine)]
        assert active and result.token_ids == alone[0].token_ids
        assert torch.allclose(torch.tensor(result.log_probs), torch.tensor(alone[0].log_probs), atol=1e-5)
    assert torch.equal(torch.random.get_rng_state(), state), (
        "multi-turn sampling must not consume the training RNG"
    )
    # another call or another key: other draws
    assert rollout.generate_requests([mine], (2,))[0][0].token_ids != alone[0].token_ids
    other_key = _requests(params, [[1, 7, 8, 9, 10]], first_key=4)[0]
    assert rollout.generate_requests([other_key], (1,))[0][0].token_ids != alone[0].token_ids


def test_multi_turn_sampling_matches_the_configured_distribution(misleading_model_dir):
    """The per-request sampler (PerRequestSampler) draws from the configured distribution and
    reports its log-probs, as generate_tokens' sampling does (thousands of one-token requests)."""
    rollout, actor = _rollout_and_actor(misleading_model_dir)
    prompt = [1, 7, 8, 9, 10]
    with torch.no_grad():
        logits = actor(input_ids=torch.tensor([prompt])).logits[0, -1]
    num_draws, tolerance = 6000, 0.08
    for case in (SAMPLING_CASES[0], SAMPLING_CASES[-1]):  # verl's defaults; all three warpers
        params = SamplingParams(n=1, temperature=case[0], top_k=case[1], top_p=case[2], response_length=1)
        results, _ = rollout.generate_requests(_requests(params, [prompt] * num_draws), (1,))
        tokens = torch.tensor([r.token_ids[0] for r in results])
        probs = reference_probs(logits, *case)
        distance = total_variation(tokens, probs)
        assert distance < tolerance, (
            f"{case}: sampled frequencies are {distance:.3f} from the configured distribution"
        )
        expected = probs[tokens].log()
        got = torch.tensor([r.log_probs[0] for r in results], dtype=torch.float64)
        assert (expected - got).abs().max() < 1e-4, case


def test_a_request_ends_at_any_eos_the_folders_generation_config_lists(tiny_model_dir, tmp_path):
    """As vLLM: gpt-oss's folder lists <|call|> beside its EOS, and a tool-calling turn ends there."""
    import shutil

    from transformers import GenerationConfig

    params = SamplingParams(n=1, response_length=8, do_sample=False)
    rollout = HFRollout(tiny_model(tiny_model_dir), tiny_rollout(seed=3), build_tokenizer(), rank=0)
    (free,), _ = rollout.generate_requests(_requests(params, [[1, 7, 8]]), (1,))
    assert free.stop_reason == "length" and len(free.token_ids) == 8
    stop = free.token_ids[2]  # the third greedy token, listed as an end
    path = shutil.copytree(tiny_model_dir, tmp_path / "model")
    GenerationConfig(eos_token_id=[build_tokenizer().eos_token_id, stop]).save_pretrained(path)
    listed = HFRollout(tiny_model(str(path)), tiny_rollout(seed=3), build_tokenizer(), rank=0)
    (ended,), _ = listed.generate_requests(_requests(params, [[1, 7, 8]]), (1,))
    first = free.token_ids.index(stop)
    assert ended.token_ids == free.token_ids[: first + 1] and ended.stop_reason == "eos"


def test_a_single_turn_response_ends_at_any_listed_eos_and_its_mask_with_it(tiny_model_dir, tmp_path):
    """Qwen2.5's instruct folders list <|endoftext|> (also their pad token) beside <|im_end|>: a
    response that ends at the other one is cut there, and the worker's mask (assemble with the
    rollout's stop_ids) ends there too, not at the padding after it."""
    import shutil

    from transformers import GenerationConfig

    from verl_lite.rollout.base import assemble

    tok = build_tokenizer()
    params = SamplingParams(n=1, response_length=8, do_sample=False)
    ids, mask = torch.tensor([[1, 7, 8]]), torch.ones(1, 3, dtype=torch.long)
    rollout = HFRollout(tiny_model(tiny_model_dir), tiny_rollout(seed=3), tok, rank=0)
    free, _ = rollout.generate_tokens(ids, mask, params)
    stop = int(free[0, 2])  # the third greedy token, listed as an end
    assert free.shape[1] == 8 and stop != tok.eos_token_id and rollout.stop_ids == [tok.eos_token_id]
    path = shutil.copytree(tiny_model_dir, tmp_path / "model")
    GenerationConfig(eos_token_id=[tok.eos_token_id, stop]).save_pretrained(path)
    listed = HFRollout(tiny_model(str(path)), tiny_rollout(seed=3), tok, rank=0)
    assert listed.stop_ids == [tok.eos_token_id, stop]
    first = free[0].tolist().index(stop)
    tokens, log_probs = listed.generate_tokens(torch.cat([ids, ids]), torch.cat([mask, mask]), params)
    assert tokens[0, : first + 1].tolist() == free[0, : first + 1].tolist()
    assert (log_probs[0, first + 1 :] == 0).all()
    # a batch mate runs longer: the finished row is padded, and padded with the stop token itself
    raw = torch.cat([tokens[:1, : first + 1], torch.full((1, 8 - first - 1), stop)], dim=1)
    raw = torch.cat([raw, free[:1]])
    out = assemble(
        torch.cat([ids, ids]),
        torch.cat([mask, mask]),
        torch.zeros(2, 3, dtype=torch.long),
        raw,
        1,
        8,
        eos_id=listed.stop_ids,
        pad_id=stop,
    )
    assert out["response_mask"][0].tolist() == [1] * (first + 1) + [0] * (8 - first - 1)

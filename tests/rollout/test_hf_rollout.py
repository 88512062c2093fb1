"""The HF rollout: n samples per prompt, seeded sampling, greedy decoding, weight sync."""

import pytest
import torch

from tests.helpers.configs import tiny_model, tiny_rollout
from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.rollout.base import SamplingParams
from verl_lite.rollout.hf_rollout import HFRollout


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

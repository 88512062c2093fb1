"""The generated-batch layout shared by the rollout backends."""

import torch

from verl_lite.rollout.base import assemble, response_mask_from_tokens

EOS, PAD = 2, 0


def test_response_mask_keeps_tokens_through_the_first_eos():
    tokens = torch.tensor([[5, 6, EOS, 7, EOS], [5, 5, 5, 5, 5], [EOS, 4, 4, 4, 4]])
    assert response_mask_from_tokens(tokens, EOS).tolist() == [
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1],
        [1, 0, 0, 0, 0],
    ]


def test_assemble_repeats_prompts_pads_after_eos_and_continues_positions():
    prompt = torch.tensor([[PAD, 8, 9], [10, 11, 12]])
    p_mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    p_pos = torch.tensor([[0, 0, 1], [0, 1, 2]])
    raw = torch.tensor([[5, EOS, 6], [5, 6, 7], [EOS, 3, 3], [4, 4, 4]])  # n=2, shorter than R=4
    out = assemble(prompt, p_mask, p_pos, raw, n=2, response_length=4, eos_id=EOS, pad_id=PAD)
    assert out["prompts"].tolist() == [[PAD, 8, 9], [PAD, 8, 9], [10, 11, 12], [10, 11, 12]]
    assert out["responses"].tolist() == [
        [5, EOS, PAD, PAD],
        [5, 6, 7, PAD],
        [EOS, PAD, PAD, PAD],
        [4, 4, 4, PAD],
    ]
    assert out["response_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 0]]
    assert out["input_ids"].shape == (4, 7)
    assert out["attention_mask"][0].tolist() == [0, 1, 1, 1, 1, 0, 0]
    assert out["position_ids"][0].tolist() == [0, 0, 1, 2, 3, 4, 5]
    assert out["position_ids"][2].tolist() == [0, 1, 2, 3, 4, 5, 6]


def test_ignore_eos_keeps_every_generated_token():
    out = assemble(
        torch.ones(1, 2).long(),
        torch.ones(1, 2).long(),
        torch.tensor([[0, 1]]),
        torch.tensor([[EOS, 5, EOS]]),
        n=1,
        response_length=3,
        eos_id=EOS,
        pad_id=PAD,
        stop_at_eos=False,
    )
    assert out["response_mask"].tolist() == [[1, 1, 1]] and out["responses"].tolist() == [[EOS, 5, EOS]]


def test_the_mask_ends_at_the_first_of_several_stop_tokens():
    """The rollout's stop_ids (the tokenizer's EOS and the folder's other eos_token_ids): a response
    that ended at the second one, padded with it (Qwen's pad is its <|endoftext|>), keeps no padding."""
    other = 9
    tokens = torch.tensor([[5, other, other, other], [5, 6, EOS, other], [5, 6, 7, 8]])
    assert response_mask_from_tokens(tokens, [EOS, other]).tolist() == [
        [1, 1, 0, 0],
        [1, 1, 1, 0],
        [1, 1, 1, 1],
    ]
    assert response_mask_from_tokens(tokens, EOS).tolist()[0] == [1, 1, 1, 1]  # EOS alone: padding kept

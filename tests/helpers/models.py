"""Tiny models and batches built locally for tests (no hub)."""

from __future__ import annotations

import os

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.protocol import DataProto


def tiny_config(tokenizer, hidden: int, num_layers: int, **extra) -> Qwen2Config:
    """The tiny Qwen2 shape over the tiny tokenizer: head_dim 32, one KV head, 64 positions."""
    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=num_layers,
        num_attention_heads=hidden // 32,
        num_key_value_heads=1,
        max_position_embeddings=64,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **extra,
    )


def make_tiny_model_dir(path: str, seed: int = 0, num_layers: int = 2, hidden: int = 64) -> str:
    """A random Qwen2 (head_dim 32) with the tiny tokenizer, saved as a HF folder."""
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    tokenizer = build_tokenizer()
    config = tiny_config(tokenizer, hidden, num_layers, tie_word_embeddings=True)
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_ppo_batch(
    vocab: int, bs: int = 8, prompt_len: int = 6, response_len: int = 5, seed: int = 0
) -> dict:
    """A PPO batch in verl's layout with ragged prompt and response lengths."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, vocab, (bs, prompt_len), generator=g)
    responses = torch.randint(3, vocab, (bs, response_len), generator=g)
    p_len = torch.randint(2, prompt_len + 1, (bs,), generator=g)
    r_len = torch.randint(1, response_len + 1, (bs,), generator=g)
    p_mask = (torch.arange(prompt_len).unsqueeze(0) >= prompt_len - p_len.unsqueeze(1)).long()
    r_mask = (torch.arange(response_len).unsqueeze(0) < r_len.unsqueeze(1)).long()
    prompts = prompts * p_mask
    responses = responses * r_mask
    attention_mask = torch.cat([p_mask, r_mask], -1)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return {
        "input_ids": torch.cat([prompts, responses], -1),
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "responses": responses,
        "response_mask": r_mask,
        "advantages": torch.randn(bs, response_len, generator=g) * r_mask,
        "old_log_probs": -torch.rand(bs, response_len, generator=g) * 3,
        "ref_log_prob": -torch.rand(bs, response_len, generator=g) * 3,
    }


def make_critic_batches(steps: int, rows: int, response_len: int, vocab: int = 110) -> list[dict]:
    """One PPO batch per step for critic updates: make_ppo_batch's layout plus the old values and
    the returns (seeds 20 + step and 100 + step)."""
    out = []
    for s in range(steps):
        b = make_ppo_batch(vocab=vocab, bs=rows, prompt_len=6, response_len=response_len, seed=20 + s)
        g = torch.Generator().manual_seed(100 + s)
        b["values"] = torch.randn(rows, response_len, generator=g) * 0.1 * b["response_mask"]
        b["returns"] = torch.randn(rows, response_len, generator=g) * b["response_mask"]
        out.append(b)
    return out


def make_tiny_reward_model_dir(path: str, seed: int = 0, hidden: int = 64) -> str:
    """A random scalar reward model (Qwen2ForSequenceClassification, num_labels=1) with the tiny
    tokenizer, saved as a HF folder: the layout `reward_model.model.path` expects."""
    from transformers import Qwen2ForSequenceClassification

    if os.path.exists(os.path.join(path, "config.json")):
        return path
    tokenizer = build_tokenizer()
    config = tiny_config(tokenizer, hidden, 2, num_labels=1)
    torch.manual_seed(seed)
    Qwen2ForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_random_model_like(src: str, path: str, seed: int = 0) -> str:
    """A randomly initialised model (weights and config only) with the architecture of the folder
    `src`: near-uniform next-token distributions, so a truncation of the sampling distribution shows."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if os.path.exists(os.path.join(path, "config.json")):
        return path
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src)).save_pretrained(path)
    return path


def response_batch(tok, texts: list[str], width: int, source: str = "verl_lite/arith", truth: str = "46"):
    """Responses as the rollout gives them to the reward: each text + EOS, right-padded to `width`
    tokens, with its data_source and ground truth (a DataProto)."""
    responses = torch.full((len(texts), width), tok.pad_token_id)
    mask = torch.zeros_like(responses)
    for i, t in enumerate(texts):
        ids = tok(t)["input_ids"] + [tok.eos_token_id]
        responses[i, : len(ids)] = torch.tensor(ids)
        mask[i, : len(ids)] = 1
    return DataProto.from_dict(
        {"responses": responses, "response_mask": mask},
        {"data_source": [source] * len(texts), "reward_model": [{"ground_truth": truth}] * len(texts)},
    )

"""The embedded default model: a small Qwen2, warm-started by a short supervised phase.

RL needs a policy that already solves part of the task, or every group of samples scores zero and
GRPO has no signal. A short SFT run on the task's `sft` split (disjoint from RL train and validation)
brings the model to a partial solve rate; RL then has room to raise it. Everything is seeded; run as
`python -m verl_lite.data.warm_start <folder>` under pinned_build's environment (one thread, fixed
kernels), the same weights come out bit for bit on every machine the pin covers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from verl_lite.data import arith

# head_dim = hidden_size / num_attention_heads = 32: a size vLLM's CPU attention kernels accept.
TINY_MODEL_SHAPE = dict(
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
SFT_STEPS, SFT_BATCH, SFT_LR, SFT_SEED = 275, 64, 5e-4, 0


def build_tiny_model(tokenizer: PreTrainedTokenizerFast, seed: int = SFT_SEED, **shape) -> Qwen2ForCausalLM:
    """The tiny Qwen2, randomly initialised by `seed`; `shape` overrides TINY_MODEL_SHAPE's entries."""
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        rope_theta=10000.0,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        **(TINY_MODEL_SHAPE | shape),
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)


def _sft_examples(tokenizer: PreTrainedTokenizerFast) -> list[tuple[list[int], list[int]]]:
    examples = []
    for a, b in arith.split_pairs()["sft"]:
        messages = [{"role": "user", "content": arith.question(a, b)}]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        target = tokenizer(arith.answer(a, b))["input_ids"] + [tokenizer.eos_token_id]
        examples.append((tokenizer(prompt)["input_ids"], target))
    return examples


def row(context: list[int], target: list[int]) -> tuple[list[int], list[int]]:
    """A training row (ids, labels) of a (context, target) pair: the loss on the target only."""
    return context + target, [-100] * len(context) + target


def _collate(rows, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded (ids, labels) rows; labels -100 where no loss is taken."""
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad_id)
    labels = torch.full((len(rows), width), -100)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (seq, seq_labels) in enumerate(rows):
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(seq)] = 1
        labels[i, : len(seq)] = torch.tensor(seq_labels)
    return ids, mask, labels


def supervised_steps(
    model,
    rows: list[tuple[list[int], list[int]]],
    pad_id: int,
    steps: int,
    lr: float,
    batch_size: int,
    seed: int,
) -> list[float]:
    """AdamW steps on random batches of the (ids, labels) rows, loss where labels are not -100; the
    loss curve."""
    optim = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for _ in range(steps):
        picked = torch.randint(0, len(rows), (batch_size,), generator=gen).tolist()
        ids, mask, labels = _collate([rows[r] for r in picked], pad_id)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        losses.append(loss.item())
    model.eval()
    return losses


def build_model_folder(folder: str | Path, sft_steps: int = SFT_STEPS) -> dict:
    """Tokenizer + warm-started model saved as a HF folder; returns what the build record keeps.
    `sft_steps` other than SFT_STEPS only for tests that check the build's determinism quickly."""
    from verl_lite.data.pinned_build import describe_pin, weights_digest
    from verl_lite.data.tiny_tokenizer import build_tokenizer

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    tokenizer = build_tokenizer()
    model = build_tiny_model(tokenizer)
    rows = [row(context, target) for context, target in _sft_examples(tokenizer)]
    losses = supervised_steps(model, rows, tokenizer.pad_token_id, sft_steps, SFT_LR, SFT_BATCH, SFT_SEED)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {
        "sft_final_loss": round(sum(losses[-20:]) / 20, 4),
        "num_params": model.num_parameters(),
        "weights_sha256": weights_digest(folder),
        **describe_pin(),
    }


if __name__ == "__main__":  # the pinned child process of data/assets.py: <folder> [sft_steps]
    print(json.dumps(build_model_folder(sys.argv[1], *map(int, sys.argv[2:3]))))

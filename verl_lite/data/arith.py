"""The embedded task: add two numbers, checked by a rule.

Prompts are chat messages ("37+58=") and the ground truth is the sum ("95"). The pairs (a, b) with
0 <= a, b < 100 are split once, by a fixed seed, into three disjoint sets: one for the supervised
warm start, one for RL training, one for validation, so the validation reward measures
generalisation to pairs neither phase saw.
"""

from __future__ import annotations

import random

DATA_SOURCE = "verl_lite/arith"
MAX_OPERAND = 100
SPLIT_SIZES = {"sft": 3000, "train": 6000, "test": 1000}


def split_pairs(seed: int = 1234) -> dict[str, list[tuple[int, int]]]:
    return split([(a, b) for a in range(MAX_OPERAND) for b in range(MAX_OPERAND)], SPLIT_SIZES, seed)


def split(pairs: list, sizes: dict[str, int], seed: int) -> dict[str, list]:
    """`pairs` shuffled by `seed`, then cut into consecutive named splits of the given sizes."""
    pairs = list(pairs)
    random.Random(seed).shuffle(pairs)
    out, start = {}, 0
    for name, size in sizes.items():
        out[name] = pairs[start : start + size]
        start += size
    return out


def question(a: int, b: int) -> str:
    return f"{a}+{b}="


def answer(a: int, b: int) -> str:
    return str(a + b)


def to_rows(pairs: list[tuple[int, int]], split: str) -> list[dict]:
    """verl's RLHF parquet layout: data_source, prompt (messages), ability, reward_model, extra_info."""
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": question(a, b)}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer(a, b)},
            "extra_info": {"split": split, "index": i, "a": a, "b": b},
        }
        for i, (a, b) in enumerate(pairs)
    ]

"""Generations as text: jsonl dumps (`trainer.rollout_data_dir`, `trainer.validation_data_dir`) and
the samples of `trainer.log_val_generations`.

A dump is one file per step, `<dir>/<step>.jsonl`, one line per response with verl's fields:
input (the prompt as the model saw it), output (the response), gts (the ground truth), score
(the sequence's reward), step, and any extra details the reward function returned.
Prompts and responses are decoded with the tokenizer without special tokens, as verl does.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from verl_lite.algos.masked import response_lengths
from verl_lite.protocol import DataProto
from verl_lite.trainer.tracking import written


@dataclass
class Generations:
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    gts: list = field(default_factory=list)
    extra: dict[str, list] = field(default_factory=dict)

    @classmethod
    def decode(
        cls, tokenizer, batch: DataProto, scores: list[float], extra: dict | None = None
    ) -> Generations:
        """Texts of a batch holding `prompts` (left-padded), `responses` and `attention_mask` (a
        multi-turn response with its tool and user turns)."""
        prompts, responses = batch.batch["prompts"], batch.batch["responses"]
        lengths = response_lengths(batch.batch["attention_mask"], responses.shape[1]).tolist()
        inputs = tokenizer.batch_decode(prompts.tolist(), skip_special_tokens=True)
        outputs = [
            tokenizer.decode(r[: int(n)].tolist(), skip_special_tokens=True)
            for r, n in zip(responses, lengths)
        ]
        gts = [dict(rm).get("ground_truth") for rm in batch.non_tensor_batch["reward_model"]]
        extra = {k: list(v) for k, v in (extra or {}).items() if len(v) == len(inputs)}
        return cls(inputs, outputs, [float(s) for s in scores], gts, extra)

    def extend(self, other: Generations) -> None:
        n = len(self.inputs)
        self.inputs += other.inputs
        self.outputs += other.outputs
        self.scores += other.scores
        self.gts += other.gts
        for key in set(self.extra) | set(other.extra):
            if key not in other.extra or (n and key not in self.extra):
                self.extra.pop(key, None)  # only details every batch has line up with the rows
            else:
                self.extra[key] = self.extra.get(key, []) + other.extra[key]

    def __len__(self) -> int:
        return len(self.inputs)


def _plain(value):
    """JSON-safe: numpy scalars and arrays become Python numbers and lists."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def dump_jsonl(gens: Generations, directory: str, step: int) -> str:
    """Write `<directory>/<step>.jsonl` (replacing it: a re-run step overwrites its own dump)."""
    path = os.path.join(directory, f"{step}.jsonl")
    with written(path, step):
        os.makedirs(directory, exist_ok=True)
        with open(path, "w") as f:
            for i in range(len(gens)):
                row = {
                    "input": gens.inputs[i],
                    "output": gens.outputs[i],
                    "gts": _plain(gens.gts[i]),
                    "score": gens.scores[i],
                    "step": step,
                    **{k: _plain(v[i]) for k, v in gens.extra.items()},
                }
                f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    return path


def pick_samples(gens: Generations, num: int, seed: int = 42) -> list[tuple[str, str, float]]:
    """`num` (input, output, score) samples, the same prompts at every validation (verl's choice:
    sort by input, shuffle with a fixed seed, take the first `num`) so their progress can be followed."""
    if num <= 0 or not len(gens):
        return []
    samples = sorted(zip(gens.inputs, gens.outputs, gens.scores), key=lambda s: s[0])
    np.random.RandomState(seed).shuffle(samples)
    return [tuple(s) for s in samples[:num]]


def record_validation(gens: Generations, trainer_cfg, tracker, step: int) -> None:
    """After a validation: dump it (`validation_data_dir`) and log `log_val_generations` samples."""
    if trainer_cfg.validation_data_dir:
        dump_jsonl(gens, trainer_cfg.validation_data_dir, step)
    samples = pick_samples(gens, trainer_cfg.log_val_generations)
    if samples and tracker is not None:
        tracker.log_generations(samples, step)

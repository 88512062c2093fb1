"""The tool demo's model (`verl_lite://tiny-qwen2-tool`): the demo's tiny Qwen2 shape with room for a
multi-turn response, the tiny tokenizer with the tool chat template, warm-started on traces of the
calculator task (data/arith_tool.py) in the rollout's own token layout (data/tool_traces.py).

Its 2,000 traces call the calculator for most prompts whose first factor is below
arith_tool.TOOL_BELOW and for a minority of the others (arith_tool.warm_start_traces), so the model
starts by calling the tool greedily for the prompts below 40 only, sampling it for the rest now and
then: greedy validation reward starts well below saturation and GRPO has room and signal to raise it.
Each trace is one training row (tool_traces.trace_row: the call and the answer after the tool's
reply learnt in one sequence, the loss on both), 600 steps. Learnt as separate (context, turn)
pairs (the first versions), copying the tool's result into the answer appeared abruptly between
steps 300 and 1,000 depending on the token layout (verl's turn separator moved it past 600); as rows
(a step then sees ~1.5 times the assistant turns, at the cost of the same padded width) it is there
by step 400 (a greedy check along one build: 0.79 of the answers exact at 400, 0.84 at 600). The pinned build (assets v7), greedy
on 200 validation prompts: the tool called for every prompt below 40 and none from 40 on, 70% of
those calls answered exactly (call and copy), reward 0.24.
The prompts list no tool schemas (conf/tool_demo.yaml sets data.tool_config_path=null): with a
character vocabulary the schema block alone is ~600 tokens, 40 times the question; the model knows
its one tool from the warm start. Built like the single-turn model (data/warm_start.py): seeded, in
a pinned child process, `python -m verl_lite.data.tool_warm_start <folder> [steps]`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from verl_lite.data import arith_tool
from verl_lite.data.tool_traces import trace_row
from verl_lite.data.warm_start import build_tiny_model, supervised_steps

MAX_POSITIONS = 256  # prompt (16) + a call, the tool's reply and the answer (~140 tokens)
SFT_STEPS, SFT_BATCH, SFT_LR, SFT_SEED = 600, 32, 3e-3, 0


def rows(tokenizer) -> list[tuple[list[int], list[int]]]:
    """One training row per trace: the call and the answer after the tool's reply learnt together."""
    return [trace_row(tokenizer, trace) for trace in arith_tool.warm_start_traces()]


def build_model_folder(folder: str | Path, sft_steps: int = SFT_STEPS) -> dict:
    """Tokenizer (with the tool chat template) + warm-started model saved as a HF folder."""
    from verl_lite.data.pinned_build import describe_pin, weights_digest
    from verl_lite.data.tiny_tokenizer import build_tokenizer
    from verl_lite.data.tool_chat_template import TOOL_CHAT_TEMPLATE

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    tokenizer = build_tokenizer()
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    model = build_tiny_model(tokenizer, SFT_SEED, max_position_embeddings=MAX_POSITIONS)
    losses = supervised_steps(
        model, rows(tokenizer), tokenizer.pad_token_id, sft_steps, SFT_LR, SFT_BATCH, SFT_SEED
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    tail = losses[-10:]
    return {
        "sft_final_loss": round(sum(tail) / len(tail), 4),
        "num_params": model.num_parameters(),
        "weights_sha256": weights_digest(folder),
        **describe_pin(),
    }


if __name__ == "__main__":  # the pinned child process of data/assets.py: <folder> [sft_steps]
    print(json.dumps(build_model_folder(sys.argv[1], *map(int, sys.argv[2:3]))))

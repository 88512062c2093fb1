"""Turn GSM8K files on disk into verl's tool-agent layout (verl's examples/data_preprocess/
gsm8k_tool_agent_loop.py): `train.parquet` and `test.parquet` for multi-turn GRPO with the GSM8K tool.

    python scripts/data_preprocess/gsm8k_tool_agent_loop.py --local_dataset_path ~/datasets/gsm8k --local_save_dir ~/data/gsm8k
    python scripts/data_preprocess/gsm8k_tool_agent_loop.py --train_files train.jsonl --test_files test.jsonl --local_save_dir out

Input: as scripts/data_preprocess/gsm8k.py reads it (GSM8K's jsonl or the hub snapshot's parquet, on
disk; nothing is downloaded). Output rows, as verl writes them:
    data_source  "openai/gsm8k"
    agent_name   "tool_agent" (the row's agent loop)
    prompt       [system: verl's tool-use instructions, user: question + " " + INSTRUCTION]
    ability      "math"
    reward_model {"style": "rule", "ground_truth": the number after ####}
    extra_info   {split, index, answer, question, need_tools_kwargs: True,
                  tools_kwargs: {calc_gsm8k_reward: {create_kwargs: {ground_truth}}},
                  interaction_kwargs: {query, ground_truth}}
Train with verl's tool config (examples/sglang_multiturn/config/tool_config/gsm8k_tool_config.yaml)
as actor_rollout_ref.rollout.multi_turn.tool_config_path (docs/multi_turn.md).
"""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gsm8k  # noqa: E402  (the sibling script: reading GSM8K's files, the ground truth)

AGENT_NAME = "tool_agent"
TOOL_NAME = "calc_gsm8k_reward"
INSTRUCTION = "Let's think step by step and output the final answer after `####`."
SYSTEM = (
    "You are a math expert. You are given a question and you need to solve it step by step. "
    "Reasoning step by step before any tool call. "
    f"You should use the `{TOOL_NAME}` tool after step by step solving the question, "
    "before generate final answer at least once and refine your answer if necessary. "
    "Put your final answer in the format of `#### <answer>`."
)


def to_rows(frame: pd.DataFrame, split: str) -> list[dict]:
    rows = []
    for index, (question, answer, path) in enumerate(
        zip(frame["question"], frame["answer"], frame["__file__"])
    ):
        truth = gsm8k.ground_truth(answer, f"{path} row {index}")
        full = f"{question} {INSTRUCTION}"
        rows.append(
            {
                "data_source": gsm8k.DATA_SOURCE,
                "agent_name": AGENT_NAME,
                "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": full}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": truth},
                "extra_info": {
                    "split": split,
                    "index": index,
                    "answer": answer,
                    "question": question,
                    "need_tools_kwargs": True,
                    "tools_kwargs": {TOOL_NAME: {"create_kwargs": {"ground_truth": truth}}},
                    "interaction_kwargs": {"query": full, "ground_truth": truth},
                },
            }
        )
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--local_save_dir", default="~/data/gsm8k", help="output folder for train/test.parquet"
    )
    parser.add_argument("--local_dir", help="verl's deprecated name of --local_save_dir")
    parser.add_argument("--local_dataset_path", help="a GSM8K folder (hub snapshot or original release)")
    parser.add_argument(
        "--train_files", nargs="+", help="train jsonl/parquet files (instead of the folder's)"
    )
    parser.add_argument("--test_files", nargs="+", help="test jsonl/parquet files (instead of the folder's)")
    args = parser.parse_args(argv)
    for split in gsm8k.SPLITS:
        if not getattr(args, f"{split}_files") and not args.local_dataset_path:
            parser.error(f"give --local_dataset_path or --{split}_files")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out_dir = os.path.expanduser(args.local_dir or args.local_save_dir)
    os.makedirs(out_dir, exist_ok=True)
    for split in gsm8k.SPLITS:
        files = getattr(args, f"{split}_files") or gsm8k.find_split(
            os.path.expanduser(args.local_dataset_path), split
        )
        rows = to_rows(gsm8k.read_files(files), split)
        out = os.path.join(out_dir, f"{split}.parquet")
        pd.DataFrame(rows).to_parquet(out)
        print(f"{split}: {len(rows)} rows from {files} -> {out}")


if __name__ == "__main__":
    try:
        main()
    except (ValueError, FileNotFoundError) as e:
        print(f"gsm8k_tool_agent_loop preprocess: {e}", file=sys.stderr)
        sys.exit(2)

"""Turn GSM8K files on disk into verl's RLHF parquet layout: `train.parquet` and `test.parquet`.

    python scripts/data_preprocess/gsm8k.py --local_dataset_path ~/datasets/gsm8k --local_dir ~/data/gsm8k
    python scripts/data_preprocess/gsm8k.py --train_files train.jsonl --test_files test.jsonl --local_dir out

Input: GSM8K's own layout, rows with `question` and `answer` where the answer ends in `#### <number>`,
as jsonl (the original release: train.jsonl, test.jsonl) or parquet (the `openai/gsm8k` hub snapshot:
main/train-00000-of-00001.parquet). Nothing is downloaded: machines here have no hub access.
Output rows, as verl's examples/data_preprocess/gsm8k.py writes them, so verl's parquet files and these
are interchangeable:
    data_source  "openai/gsm8k" (picks the GSM8K scorer)
    prompt       [{"role": "user", "content": question + " " + INSTRUCTION}]
    ability      "math"
    reward_model {"style": "rule", "ground_truth": the number after ####, commas removed}
    extra_info   {"split", "index", "answer", "question"}
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys

import pandas as pd

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
SPLITS = ("train", "test")
# where a split lives in a GSM8K folder: the hub snapshot, the original release, a flat folder
LAYOUT = (
    "main/{split}-*.parquet",
    "grade_school_math/data/{split}.jsonl",
    "{split}.jsonl",
    "{split}.parquet",
)
_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")


def find_split(folder: str, split: str) -> list[str]:
    for pattern in LAYOUT:
        files = sorted(glob.glob(os.path.join(folder, pattern.format(split=split))))
        if files:
            return files
    searched = ", ".join(p.format(split=split) for p in LAYOUT)
    raise FileNotFoundError(f"--local_dataset_path={folder!r}: no {split} files (looked for {searched})")


def read_files(files: list[str]) -> pd.DataFrame:
    frames = []
    for path in files:
        if path.endswith(".jsonl"):
            frame = pd.read_json(path, lines=True)
        elif path.endswith(".parquet"):
            frame = pd.read_parquet(path)
        else:
            raise ValueError(f"{path!r}: expected a .jsonl or .parquet file")
        missing = {"question", "answer"} - set(frame.columns)
        if missing:
            raise ValueError(f"{path!r}: no column(s) {sorted(missing)}; GSM8K rows have question and answer")
        frame["__file__"] = path
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def ground_truth(answer: str, where: str) -> str:
    match = _ANSWER.search(answer)
    if match is None:
        raise ValueError(f"{where}: the answer has no '#### <number>' line: {answer[-80:]!r}")
    return match.group(1).replace(",", "")


def to_rows(frame: pd.DataFrame, split: str) -> list[dict]:
    rows = []
    for index, (question, answer, path) in enumerate(
        zip(frame["question"], frame["answer"], frame["__file__"])
    ):
        where = f"{path} row {index}"
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": ground_truth(answer, where)},
                "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
            }
        )
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_dir", default="~/data/gsm8k", help="output folder for train/test.parquet")
    parser.add_argument("--local_dataset_path", help="a GSM8K folder (hub snapshot or original release)")
    parser.add_argument(
        "--train_files", nargs="+", help="train jsonl/parquet files (instead of the folder's)"
    )
    parser.add_argument("--test_files", nargs="+", help="test jsonl/parquet files (instead of the folder's)")
    args = parser.parse_args(argv)
    for split in SPLITS:
        if not getattr(args, f"{split}_files") and not args.local_dataset_path:
            parser.error(f"give --local_dataset_path or --{split}_files")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out_dir = os.path.expanduser(args.local_dir)
    os.makedirs(out_dir, exist_ok=True)
    for split in SPLITS:
        files = getattr(args, f"{split}_files") or find_split(
            os.path.expanduser(args.local_dataset_path), split
        )
        rows = to_rows(read_files(files), split)
        out = os.path.join(out_dir, f"{split}.parquet")
        pd.DataFrame(rows).to_parquet(out)
        print(f"{split}: {len(rows)} rows from {files} -> {out}")


if __name__ == "__main__":
    try:
        main()
    except (ValueError, FileNotFoundError) as e:
        print(f"gsm8k preprocess: {e}", file=sys.stderr)
        sys.exit(2)

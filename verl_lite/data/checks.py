"""The data's start-up check (registered in verl_lite/startup.py): truncation mode and the files
and tokenizer folder the run reads (read themselves later, before Ray, by RLHFDataset)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from verl_lite.data.rlhf_dataset import TRUNCATIONS

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig


def check_data(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    d, problems = cfg.data, []
    if d.truncation not in TRUNCATIONS:
        problems.append(f"data.truncation={d.truncation!r} is not one of {list(TRUNCATIONS)}")
    for key in ("train_files", "val_files"):
        files = getattr(d, key)
        if key == "train_files" and not files:
            problems.append("data.train_files is empty; point it at one or more parquet files")
        for f in files or []:
            if not os.path.isfile(f):
                problems.append(
                    f"data.{key}: {f!r} does not exist; generate it or point data.{key} at a parquet file"
                )
    for key in ("train_max_samples", "val_max_samples"):
        value = getattr(d, key)
        if value == 0 or value < -1:
            problems.append(f"data.{key}={value} must be -1 (all rows) or a positive number of rows")
    if d.tokenizer and not os.path.isdir(d.tokenizer):
        problems.append(f"data.tokenizer={d.tokenizer!r}: no such folder")
    return problems

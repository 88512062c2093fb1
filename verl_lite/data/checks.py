"""The data's start-up steps (registered in verl_lite/preflight.py): the
parquet files the run reads (data/files.py; their rows are read later, before Ray, by RLHFDataset),
and, once the datasets are loaded, that a training batch fits the data."""

from __future__ import annotations

from typing import TYPE_CHECKING

from verl_lite.data.files import check_parquet_files
from verl_lite.data.rlhf_dataset import RLHFDataset, check_batch_fits

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig


def check_data(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    d = cfg.data  # data.truncation's choices: config/values.py
    problems = check_parquet_files(d.train_files, "data.train_files")
    problems += check_parquet_files(d.val_files, "data.val_files", required=False)
    return problems


def check_batch(cfg: PPOTrainerConfig, run: Run, train: RLHFDataset, val: RLHFDataset | None) -> list[str]:
    """A training batch (drop_last) no larger than the loaded training set."""
    problem = check_batch_fits(train, cfg.data.train_batch_size, "data.train_batch_size", "data.train_files")
    return [problem] if problem else []

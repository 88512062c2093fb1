"""Data: the parquet RLHF dataset, the tiny arithmetic task and the embedded default assets."""

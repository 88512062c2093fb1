"""verl.utils.reward_score.gsm8k: verl_lite's GSM8K scorer, verl's signature (reward/gsm8k.py)."""

from verl_lite.reward.gsm8k import compute_score, extract_solution

__all__ = ["compute_score", "extract_solution"]

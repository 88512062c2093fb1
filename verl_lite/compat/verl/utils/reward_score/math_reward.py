"""verl.utils.reward_score.math_reward: verl_lite's \\boxed{} answer scorer (reward/math_answer.py)."""

from verl_lite.reward.math_answer import compute_score, is_equiv, last_boxed_only_string, remove_boxed

__all__ = ["compute_score", "is_equiv", "last_boxed_only_string", "remove_boxed"]

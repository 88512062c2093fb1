"""The arithmetic task's scorer with the `acc` that verl's math scorers return beside the score.

verl's DAPO math scorer returns {"score", "acc", "pred"}, and verl's DAPO configs filter groups on
`acc` (algorithm.filter_groups.metric=acc). The launch check swaps verl's math data for the embedded
arithmetic task, whose built-in scorer returns a number; scripts/verl_launch_check.py points such a
launch here, so the filter reads what it reads in verl: whether each response is right.
"""

from verl_lite.reward.scorers import default_compute_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    score = default_compute_score(data_source, solution_str, ground_truth, extra_info)
    return {"score": score, "acc": float(score == 1.0)}

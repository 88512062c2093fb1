"""verl.utils.reward_score: verl's scorer dispatch by data_source and its gsm8k and math_reward modules.

`default_compute_score` keeps verl's signature; it scores the data sources verl_lite has scorers for
(reward/scorers.py) and raises, naming the known ones, for the others (verl: NotImplementedError).
"""

from verl_lite.reward.scorers import default_compute_score as _default


def default_compute_score(
    data_source,
    solution_str,
    ground_truth,
    extra_info=None,
    sandbox_fusion_url=None,
    concurrent_semaphore=None,
    memory_limit_mb=None,
    **kwargs,
):
    return _default(data_source, solution_str, ground_truth, extra_info)


__all__ = ["default_compute_score"]

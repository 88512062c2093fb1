"""The driver's word to the actor workers that another generate comes next (meta_info
`generate_follows`), so their rollout keeps its device memory and weights: only where nothing else
uses the device in between (a reward model scoring, a critic's pass). The workers' side, and the
syncs it saves, is tests/rollout/test_vllm_sleep.py."""

from types import SimpleNamespace

from verl_lite.trainer.ppo_phases import StepPhases
from verl_lite.trainer.worker_setup import WorkerSet

WG = object()  # a worker group that exists


def _workers(rm=None, critic=None):
    workers = SimpleNamespace(rm_wg=rm, critic_wg=critic)
    workers.keep_rollout = lambda *a, **k: WorkerSet.keep_rollout(workers, *a, **k)
    return workers


def follows_gen(rm=None, critic=None, filtered=False, estimator_phases=()) -> bool:
    cfg = SimpleNamespace(algorithm=SimpleNamespace(filter_groups=SimpleNamespace(enable=filtered)))
    estimator = SimpleNamespace(phases=list(estimator_phases))  # the advantage estimator's own phases
    steps = SimpleNamespace(workers=_workers(rm, critic), config=cfg, adv_spec=estimator)
    return StepPhases.generate_follows_gen(steps)


def test_remax_keeps_the_rollout_for_its_greedy_baseline_whatever_else_the_run_has():
    remax = ("gen_max",)  # ReMax's spec
    assert follows_gen(estimator_phases=remax) and follows_gen(estimator_phases=remax, rm=WG, critic=WG)
    assert not follows_gen(), "a plain rollout: the update (or a critic, a reward model) comes next"


def test_dynamic_sampling_keeps_it_only_without_a_reward_model_or_critic():
    assert follows_gen(filtered=True), "rule scores on the driver; the next call is ours either way"
    assert not follows_gen(filtered=True, rm=WG), "the reward model scores on the device in between"
    assert not follows_gen(filtered=True, critic=WG), "no more batches: the critic's values may be next"


def test_validation_keeps_it_unless_a_reward_model_scores_each_batch():
    for critic in (None, WG):  # after validation the actor workers' own call comes first
        assert _workers(critic=critic).keep_rollout(True, surely_generate=True)
    assert not _workers(rm=WG).keep_rollout(True, surely_generate=True)

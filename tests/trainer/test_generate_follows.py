"""The driver's word to the actor workers that another generate comes next (meta_info
`generate_follows`), so their rollout keeps its device memory and weights: only where nothing else
uses the device in between (a reward model scoring, a critic's pass). The workers' side, and the
syncs it saves, is tests/rollout/test_vllm_sleep.py."""

from types import SimpleNamespace

from verl_lite.trainer.ppo_trainer import RayPPOTrainer

WG = object()  # a worker group that exists


def _driver(rm=None, critic=None, filtered=False, phases=("gen", "adv", "update_actor")):
    cfg = SimpleNamespace(algorithm=SimpleNamespace(filter_groups=SimpleNamespace(enable=filtered)))
    driver = SimpleNamespace(rm_wg=rm, critic_wg=critic, config=cfg, phases=[(p, None) for p in phases])
    driver._keep_rollout = lambda *a, **k: RayPPOTrainer._keep_rollout(driver, *a, **k)
    return driver


def follows_gen(**kw) -> bool:
    return RayPPOTrainer._generate_follows_gen(_driver(**kw))


def test_remax_keeps_the_rollout_for_its_greedy_baseline_whatever_else_the_run_has():
    remax = ("gen", "gen_max", "reward", "adv", "update_actor")
    assert follows_gen(phases=remax) and follows_gen(phases=remax, rm=WG, critic=WG)
    assert not follows_gen(), "a plain rollout: the update (or a critic, a reward model) comes next"


def test_dynamic_sampling_keeps_it_only_without_a_reward_model_or_critic():
    assert follows_gen(filtered=True), "rule scores on the driver; the next call is ours either way"
    assert not follows_gen(filtered=True, rm=WG), "the reward model scores on the device in between"
    assert not follows_gen(filtered=True, critic=WG), "no more batches: the critic's values may be next"


def test_validation_keeps_it_unless_a_reward_model_scores_each_batch():
    for critic in (None, WG):  # after validation the actor workers' own call comes first
        assert RayPPOTrainer._keep_rollout(_driver(critic=critic), True, surely_generate=True)
    assert not RayPPOTrainer._keep_rollout(_driver(rm=WG), True, surely_generate=True)

"""Which roles a run has, decided once from its config (verl's rules): a critic when critic.enable
says so, else when the advantage estimator's registered spec needs one (gae); the reference policy when a KL term
needs it; a reward model when reward_model.enable. The trainer builds its phases and worker groups
from these, and start-up checks only the roles that exist (config.run.Run)."""

from __future__ import annotations

from verl_lite.algos import ADV_ESTIMATORS
from verl_lite.config.common import world_size
from verl_lite.config.run import Run
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.utils import device as dev


def uses_critic(cfg: PPOTrainerConfig) -> bool:
    """critic.enable when set; else whether the advantage estimator's spec needs a critic (gae)."""
    if cfg.critic.enable is not None:
        return bool(cfg.critic.enable)
    name = cfg.algorithm.adv_estimator
    return ADV_ESTIMATORS.problem(name) is None and ADV_ESTIMATORS.spec(name).needs_critic


def uses_reference(cfg: PPOTrainerConfig) -> bool:
    """A reference policy is built when a KL term needs it: in the loss or in the reward (verl's rule;
    the trainer and the memory planner both ask here)."""
    return bool(cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward)


def uses_reward_model(cfg: PPOTrainerConfig) -> bool:
    return cfg.reward_model.enable


def run_of(cfg: PPOTrainerConfig, num_gpus: int) -> Run:
    return Run(
        world=world_size(cfg),
        critic=uses_critic(cfg),
        ref=uses_reference(cfg),
        reward_model=uses_reward_model(cfg),
        num_gpus=num_gpus,
        use_gpu=dev.wants_accelerator(cfg.trainer.device),
        links=_links_of(cfg),
    )


def _links_of(cfg) -> dict[str, str]:
    """config.keys.links_of, imported here: config/keys.py needs OmegaConf, which the planner's path
    on the GPU machine (scripts/gpu_check.py: no Hydra, no OmegaConf) imports this module without."""
    from verl_lite.config.keys import links_of

    return links_of(cfg)

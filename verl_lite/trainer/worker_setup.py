"""The trainer's worker groups: their slots reserved, then WorkerSet builds and shuts them down.

reserve_slots reserves each rank's slot (one Ray placement group per node, shared by the colocated
groups: actor(+reference), critic, reward model) and measures the slots' devices where something
plans with their memory; start-up then makes the config final and freezes it (preflight.finalize:
trainer.auto_offload's choice, whether an idle critic or reward model waits on the host), and the
trainer is built; WorkerSet.init_workers builds the groups in those slots, each with its sections
of the one frozen config.
"""

from __future__ import annotations

import logging

from verl_lite.config.common import dp_size, trainer_mode
from verl_lite.config.run import Run
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.single_controller import RayResourcePool, RayWorkerGroup
from verl_lite.workers.actor_rollout_ref import ActorRolloutRefWorker
from verl_lite.workers.critic import CriticWorker
from verl_lite.workers.reward_model import RewardModelWorker
from verl_lite.workers.rollout_worker import RolloutWorker

log = logging.getLogger(__name__)


def colocated_groups(config: PPOTrainerConfig, run: Run) -> int:
    """Worker groups sharing each rank's slot: actor(+ref), critic, reward model (ray_group.py)."""
    return 1 + int(run.critic) + int(config.reward_model.enable)


def reserve_slots(config: PPOTrainerConfig, run: Run) -> tuple[RayResourcePool, list[tuple[float, float]]]:
    """Reserve each rank's slot (Ray running); the pool and each slot's (device memory, its node's
    available host memory) in GiB, measured before any worker exists, when trainer.auto_offload or
    roles sharing a GPU plan with them (else []): what start-up makes the config final with."""
    t, groups = config.trainer, colocated_groups(config, run)
    r = config.actor_rollout_ref.rollout
    separate = trainer_mode(config) == "separate_async"  # its rollout group: slots of its own
    beside = r.n_gpus_per_node if separate else 0
    pool = RayResourcePool(
        t.nnodes, t.n_gpus_per_node, run.use_gpu, max_colocate_count=groups, share_node_with=beside
    )
    try:
        if separate:
            pool.rollout_pool = RayResourcePool(
                r.nnodes,
                r.n_gpus_per_node,
                run.use_gpu,
                share_node_with=t.n_gpus_per_node,
                what="actor_rollout_ref.rollout",
            )
        return pool, (pool.memory_gb() if t.auto_offload or (run.use_gpu and groups > 1) else [])
    except BaseException:
        pool.release()
        raise


class WorkerSet:
    """The worker groups of one run in the slots reserved for it: actor(+rollout, +reference) always, a
    critic and a reward model when the run has them (None otherwise); `checkpoint_wgs` are those
    with trainable state. Without a pool (a trainer driven without Ray) no group can be built."""

    def __init__(self, config: PPOTrainerConfig, run: Run, pool: RayResourcePool | None = None):
        self.config, self.use_ref, self.use_critic = config, run.ref, run.critic
        self.world_size, self.pool = run.world, pool
        self.actor_rollout_wg: RayWorkerGroup | None = None
        self.critic_wg = self.rm_wg = None
        self.separate = trainer_mode(config) == "separate_async"
        self.rollout_wg: RayWorkerGroup | None = None  # separate_async's rollout group
        self.rollout_info: list[dict] = []
        self.checkpoint_wgs: dict[str, RayWorkerGroup] = {}

    def init_workers(self) -> None:
        """Build the worker groups in the reserved slots from the final, frozen config (every group
        gets its sections of it)."""
        if self.pool is None:
            raise RuntimeError("no slots were reserved for the workers (worker_setup.reserve_slots)")
        t = self.config.trainer
        role = "actor_rollout_ref" if self.use_ref else "actor_rollout"
        self.actor_rollout_wg = RayWorkerGroup(
            self.pool,
            ActorRolloutRefWorker,
            self.config.actor_rollout_ref,
            role,
            t.dist_timeout_s,
            dict(self.config.data.apply_chat_template_kwargs),  # agent loops render inserted turns with them
            name="actor_rollout_ref",
            rollout_correction=self.config.algorithm.rollout_correction,  # the actor's bypass-mode loss
            trainer_config=self.config,  # agent loops written for verl read it (self.config)
        )
        # the critic's and reward model's processes start now too (their imports overlap the actor's
        # model build); each group builds its model in turn below
        if self.use_critic:
            rollout = self.config.actor_rollout_ref.rollout
            args = (self.config.critic, rollout.response_length, rollout.n, t.dist_timeout_s)
            self.critic_wg = RayWorkerGroup(self.pool, CriticWorker, *args, name="critic")
        if self.config.reward_model.enable:
            self.rm_wg = RayWorkerGroup(
                self.pool, RewardModelWorker, self.config.reward_model, t.dist_timeout_s, name="reward_model"
            )
        rollout_pool = self.pool.rollout_pool
        if rollout_pool is not None:  # separate_async: the standalone rollout group
            chat = self.config.data.apply_chat_template_kwargs  # agent loops render inserted turns with them
            args = (self.config.actor_rollout_ref, t.dist_timeout_s, chat, self.config)
            self.rollout_wg = RayWorkerGroup(rollout_pool, RolloutWorker, *args, name="rollout")
        # log-probs and updates go to data-parallel ranks: a sequence-parallel group shares its rows
        self.actor_rollout_wg.set_data_layout("actor", self.world_size // dp_size(self.config, "actor"))
        info = self.actor_rollout_wg.init_model()
        self.checkpoint_wgs = {"actor": self.actor_rollout_wg}  # every role with trainable state
        num_nodes = len(set(self.actor_rollout_wg.node_ids()))
        log.info(
            "workers ready: %d x %s on %d node(s), %s params (%s trained), %d reference engine(s)",
            self.world_size,
            role,
            num_nodes,
            info[0]["num_params"],
            info[0]["num_trainable_params"],
            info[0]["ref_engines"],
        )
        if self.critic_wg is not None:
            self.critic_wg.set_data_layout("critic", self.world_size // dp_size(self.config, "critic"))
            info = self.critic_wg.init_model()
            self.checkpoint_wgs["critic"] = self.critic_wg
            log.info("critic ready: %d workers, %s params", self.world_size, info[0]["num_params"])
        if self.rm_wg is not None:
            info = self.rm_wg.init_model()
            log.info("reward model ready: %d workers, %s params", self.world_size, info[0]["num_params"])
        if self.rollout_wg is not None:
            self.rollout_info = self.rollout_wg.init_model()
            log.info(
                "rollout group ready: %d x %s rollout (separate_async); weights reach it through Ray's "
                "object store, checked after every sync",
                self.rollout_wg.world_size,
                self.config.actor_rollout_ref.rollout.name,
            )

    @property
    def generator(self) -> RayWorkerGroup:
        """The group that generates validation's sequences: separate_async's rollout group, else the
        actor's (the hybrid engine)."""
        return self.rollout_wg or self.actor_rollout_wg

    def keep_rollout(self, scores_between: bool, surely_generate: bool) -> bool:
        """Whether a generate's rollout may keep its device memory (and so its weights: no sync for
        the next generate): the driver's next call to the actor workers is another generate
        (`surely_generate`; otherwise possibly their own log-prob or update phase, which release it
        first, or a critic's, which must not find the device held) and no reward model scores on the
        device in between (`scores_between`)."""
        if scores_between and self.rm_wg is not None:
            return False
        return surely_generate or self.critic_wg is None

    def shutdown(self) -> None:
        for group in (self.rollout_wg, self.critic_wg, self.rm_wg, self.actor_rollout_wg):
            if group is not None:
                group.shutdown()
        if self.pool is not None:
            self.pool.release()

"""ActorRolloutRefWorker: one Ray actor per rank holding the actor, its rollout and the reference.

The hybrid engine: the FSDP2 actor and the rollout backend live in the same process and take turns.
Before a rollout that follows an update, the actor's full weights are gathered one tensor at a time
(every rank takes part) and pushed into the rollout. The reference policy is a second engine
without an optimizer, built only when a KL term needs it.

Each method adapts DataProto <-> tensors and times itself; metrics go back in meta_info.
"""

from __future__ import annotations

import time

from torch.distributed.device_mesh import init_device_mesh

from verl_lite.config.schema import ActorRolloutRefConfig
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.protocol import DataProto
from verl_lite.rollout import build_rollout
from verl_lite.rollout.base import SamplingParams, assemble
from verl_lite.single_controller import Dispatch, Worker, register
from verl_lite.utils import device as dev
from verl_lite.utils.hf_model import load_tokenizer
from verl_lite.workers.actor import PPOActor, compute_log_prob

ROLES = ("actor_rollout", "actor_rollout_ref", "ref")


class ActorRolloutRefWorker(Worker):
    def __init__(self, config: ActorRolloutRefConfig, role: str, dist_timeout_s: int = 600):
        super().__init__()
        if role not in ROLES:
            raise ValueError(f"role {role!r} is not one of {ROLES}")
        self.config, self.role, self.dist_timeout_s = config, role, dist_timeout_s
        self.has_actor = role.startswith("actor")
        self.has_ref = role.endswith("ref")

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self) -> dict:
        self.init_distributed(self.dist_timeout_s)
        mesh = init_device_mesh(dev.device_type(), (self.world_size,))
        cfg = self.config
        self.tokenizer = load_tokenizer(cfg.model.path, cfg.model.trust_remote_code)
        self.response_length = cfg.rollout.response_length
        if self.has_actor:
            actor_cfg = cfg.actor
            self.actor_engine = FSDPEngine(
                cfg.model,
                actor_cfg.fsdp_config,
                mesh,
                role="actor",
                optim_cfg=actor_cfg.optim,
                grad_clip=actor_cfg.grad_clip,
            )
            self.actor = PPOActor(self.actor_engine, actor_cfg, self.response_length, cfg.rollout.temperature)
            self.rollout = build_rollout(cfg.rollout.name, cfg.model, cfg.rollout, self.tokenizer, self.rank)
            self.rollout_is_stale = False  # both were loaded from the same folder
        if self.has_ref:
            self.ref_engine = FSDPEngine(cfg.model, cfg.ref.fsdp_config, mesh, role="ref")
        return {"num_params": (self.actor_engine if self.has_actor else self.ref_engine).num_params()}

    # --- rollout ------------------------------------------------------------------------------------
    def _sampling(self, validate: bool) -> SamplingParams:
        r = self.config.rollout
        source = r.val_kwargs if validate else r
        return SamplingParams(
            n=source.n,
            temperature=source.temperature,
            top_k=source.top_k,
            top_p=source.top_p,
            do_sample=source.do_sample,
            response_length=self.response_length,
            ignore_eos=r.ignore_eos,
        )

    def _sync_rollout_weights(self) -> dict[str, float]:
        if not self.rollout_is_stale:
            return {}
        start = time.perf_counter()
        stats = self.rollout.update_weights(self.actor_engine.iter_full_params())
        self.rollout_is_stale = False
        return {
            "timing_s/update_weights": time.perf_counter() - start,
            "perf/update_weights_gb": stats["update_weights_gb"],
        }

    @register(Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        metrics = self._sync_rollout_weights()
        params = self._sampling(prompts.meta_info.get("validate", False))
        start = time.perf_counter()
        b = prompts.batch
        raw = self.rollout.generate_tokens(b["input_ids"], b["attention_mask"], params)
        out = assemble(
            b["input_ids"],
            b["attention_mask"],
            b["position_ids"],
            raw,
            params.n,
            params.response_length,
            eos_id=self.tokenizer.eos_token_id,
            pad_id=self.tokenizer.pad_token_id,
            stop_at_eos=not params.ignore_eos,
        )
        seconds = time.perf_counter() - start
        metrics["timing_s/generate_local"] = seconds
        metrics["perf/rollout_tokens_per_s"] = float(out["response_mask"].sum()) / max(seconds, 1e-9)
        return DataProto.from_dict(out, meta_info={"metrics": metrics})

    # --- log-probs ----------------------------------------------------------------------------------
    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, data: DataProto) -> DataProto:
        r = self.config.rollout
        logp, _ = compute_log_prob(
            self.actor_engine,
            data.batch,
            r.log_prob_micro_batch_size_per_gpu,
            r.temperature,
            with_entropy=False,
        )
        return DataProto.from_dict({"old_log_probs": logp})

    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        cfg = self.config
        logp, _ = compute_log_prob(
            self.ref_engine,
            data.batch,
            cfg.ref.log_prob_micro_batch_size_per_gpu,
            cfg.rollout.temperature,
            False,
        )
        return DataProto.from_dict({"ref_log_prob": logp})

    # --- update ---------------------------------------------------------------------------------------
    @register(Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data: DataProto) -> DataProto:
        a, n = self.config.actor, self.config.rollout.n
        mini_local = a.ppo_mini_batch_size * n // self.world_size
        start = time.perf_counter()
        metrics = self.actor.update(data.batch, mini_local, a.ppo_micro_batch_size_per_gpu)
        metrics["timing_s/update_actor_local"] = time.perf_counter() - start
        self.rollout_is_stale = True
        return DataProto(meta_info={"metrics": metrics})

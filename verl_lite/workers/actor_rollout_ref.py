"""ActorRolloutRefWorker: one Ray actor per rank holding the actor, its rollout and the reference.

The hybrid engine: the FSDP2 actor and the rollout backend live in the same process and take turns.
Before a rollout that follows an update, the actor's weights are gathered a bucket of shards per
collective (every rank takes part) and pushed into the rollout (rollout/weight_sync.py: all of them, or with
LoRA only the adapter). The reference policy is a second engine without an optimizer, built only
when a KL term needs it; with LoRA it is the actor itself with its adapters switched off, so no
second copy of the weights exists (`ref_engines` 0 in the metrics).

Each method adapts DataProto <-> tensors; metrics go back in meta_info. Engine timings, offload
traffic and peak memory accumulate over a training step and are reported with `update_actor`,
the step's last call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time

import psutil
import ray
import torch

from verl_lite.algos.chunked_logprob import DEFAULT_CHUNK
from verl_lite.config.common import trainer_mode
from verl_lite.config.schema import ActorRolloutRefConfig
from verl_lite.engine.checkpoint import load_engine, save_engine
from verl_lite.engine.forward import TokenMath
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.engine.lora_spec import LoraSpec
from verl_lite.engine.mesh import build_layout
from verl_lite.engine.parallelize import parse_dtype
from verl_lite.engine.transfers import offload_metrics
from verl_lite.protocol import DataProto
from verl_lite.rollout import build_rollout
from verl_lite.rollout.base import SamplingParams, generate_round, generate_single_turn, sampling_params
from verl_lite.rollout.weight_check import SyncCheck
from verl_lite.rollout.weight_sync import Outbox, RolloutWeights, build_weight_sync
from verl_lite.single_controller import Dispatch, Worker, register
from verl_lite.utils import device as dev
from verl_lite.utils.hf_model import load_tokenizer
from verl_lite.workers.actor import PPOActor, compute_log_prob, compute_log_prob_and_sum_pi_squared

ROLES = ("actor_rollout", "actor_rollout_ref", "ref")
ARR = "actor_rollout_ref"


def entropy_math(section) -> TokenMath:
    """The entropy keys of an actor or ref section (use_fused_kernels is the model's)."""
    return TokenMath(
        entropy_chunk=DEFAULT_CHUNK if section.entropy_from_logits_with_chunking else None,
        entropy_checkpointing=section.entropy_checkpointing,
    )


GB = 1024**3


class ActorRolloutRefWorker(Worker):
    def __init__(
        self,
        config: ActorRolloutRefConfig,
        role: str,
        dist_timeout_s: int = 600,
        chat_template_kwargs: dict | None = None,
        rollout_correction=None,
        trainer_config=None,
    ):
        """`chat_template_kwargs`: data.apply_chat_template_kwargs (agent loops render inserted turns
        with them); `rollout_correction`: algorithm.rollout_correction, which the actor's loss reads in
        bypass mode (algos/policy_loss_bypass.py); `trainer_config`: the whole config, which agent
        loops written for verl read as self.config (agent_loop/verl_args.py)."""
        super().__init__()
        if role not in ROLES:
            raise ValueError(f"role {role!r} is not one of {ROLES}")
        self.config, self.role, self.dist_timeout_s = config, role, dist_timeout_s
        self.chat_template_kwargs = dict(chat_template_kwargs or {})  # data.apply_chat_template_kwargs
        self.agent_loops = None  # agent_loop.runner.AgentLoopRunner, built at the first multi-turn rollout
        self.agent_rounds = None  # agent_loop.rounds.AgentRounds: the async modes' live trajectories
        self.rollout_correction = rollout_correction
        self.trainer_config = trainer_config
        self.has_actor = role.startswith("actor")
        self.has_ref = role.endswith("ref")
        self.engines: dict[str, FSDPEngine] = {}
        # verl 0.9's separate_async (trainer/separate_async.py): a rollout group of its own generates
        self.separate = trainer_config is not None and trainer_mode(trainer_config) == "separate_async"
        self.outbox, self.num_exports = None, 0  # separate_async's syncs to its rollout group

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self) -> dict:
        """Build the engines from the (frozen) config the driver prepared."""
        self.init_distributed(self.dist_timeout_s)
        cfg = self.config
        layout = build_layout(
            dev.device_type(),
            cfg.actor.fsdp_config.fsdp_size,
            cfg.actor.ulysses_sequence_parallel_size,
            key=f"{ARR}.actor",
        )
        self.tokenizer = load_tokenizer(
            cfg.model.tokenizer_path or cfg.model.path,
            cfg.model.trust_remote_code,
            cfg.model.custom_chat_template,
        )
        self.response_length = cfg.rollout.response_length
        if self.has_actor:
            a = cfg.actor
            self.engines["actor"] = FSDPEngine(
                cfg.model,
                a.fsdp_config,
                layout,
                role="actor",
                optim_cfg=a.optim,
                grad_clip=a.grad_clip,
                entropy=entropy_math(a),
                sp_key=f"{ARR}.actor.ulysses_sequence_parallel_size",
            )
            self.actor = PPOActor(
                self.engines["actor"],
                a,
                self.response_length,
                cfg.rollout.temperature,
                rollout_correction=self.rollout_correction,
                # separate_async: each mini-batch an update of its own (trainer/separate_async.py)
                local_updates=self.separate,
            )
            # after the FSDP2 engine, on every rank together: vLLM joins the existing process group.
            # separate_async: no rollout here -- the rollout group generates (and validates); the
            # syncs fill an Outbox for it (export_weights)
            if self.separate:
                self.rollout = self.outbox = Outbox(keep=self.rank == 0, weights_loaded=True)
            else:
                self.rollout = build_rollout(
                    cfg.rollout.name, cfg.model, cfg.rollout, self.tokenizer, self.rank
                )
            r = cfg.rollout  # a bucket of shards per collective, in the rollout's dtype (weight_gather.py)
            lora = LoraSpec.of(cfg.model)
            merge = lora is not None and lora.merge  # verl 0.9's lora.merge: W + scale * B A each sync
            self.weight_sync = build_weight_sync(
                self.engines["actor"],
                self.rollout,
                bucket_bytes=int(r.update_weights_bucket_megabytes * 1024**2),
                dtype=parse_dtype(r.dtype, "actor_rollout_ref.rollout.dtype"),
                merge=merge,
            )
            # versions: sync only after the actor moved (or first, to merge a saved adapter in)
            self.weights = RolloutWeights(self.rollout, starts_synced=not (merge and lora.adapter_path))
            # every sync verified: the engine's weights against the actor's (rollout/weight_check.py)
            self.weight_check = SyncCheck(
                self.engines["actor"],
                self.rollout,
                cfg.rollout.name,
                sent_dtype=self.weight_sync.dtype,
                merged=merge,
            )
        if self.has_ref:
            self._build_ref(layout)
        dev.reset_peak_memory()
        engine = next(iter(self.engines.values()))
        return {
            "num_params": engine.num_params(),
            "num_trainable_params": engine.num_trainable_params(),
            "ref_engines": int("ref" in self.engines),
        }

    def _build_ref(self, layout) -> None:
        """The reference policy: with LoRA, the actor with adapters off (no copy); else its own engine."""
        actor = self.engines.get("actor")
        if actor is not None and actor.lora_config is not None:
            self.ref_role, self.ref_policy = "actor", actor.adapters_disabled
        else:
            cfg = self.config
            if cfg.ref.fsdp_config.fsdp_size != cfg.actor.fsdp_config.fsdp_size:
                # every rank builds the same groups in the same order (the sp groups are the actor's)
                layout = build_layout(
                    dev.device_type(),
                    cfg.ref.fsdp_config.fsdp_size,
                    cfg.actor.ulysses_sequence_parallel_size,
                    key=f"{ARR}.ref",
                )
            self.engines["ref"] = FSDPEngine(
                cfg.model,
                cfg.ref.fsdp_config,
                layout,
                role="ref",
                entropy=entropy_math(cfg.ref),
                sp_key=f"{ARR}.ref.ulysses_sequence_parallel_size",
            )
            self.ref_role, self.ref_policy = "ref", contextlib.nullcontext

    # --- rollout ------------------------------------------------------------------------------------
    def _sampling(self, validate: bool) -> SamplingParams:
        return sampling_params(self.config.rollout, validate)

    def _sync_rollout_weights(self) -> dict[str, float]:
        """Sync the rollout's weights if due, then check them against the actor's if due (after
        every sync, and whenever the actor moved since the last check: rollout/weight_check.py)."""
        metrics, base_sent = {}, self.weights.checked_syncs < 0  # the first check covers everything
        if self.weights.sync_due():
            start = time.perf_counter()
            stats = self.weight_sync()
            self.weights.synced()
            base_sent = base_sent or bool(stats.get("base_sent", 1.0))
            metrics = {
                "timing_s/update_weights": time.perf_counter() - start,
                "perf/update_weights_gb": stats["update_weights_gb"],
                "perf/update_weights_collectives": stats["update_weights_collectives"],
            }
        if self.weights.check_due():
            start = time.perf_counter()
            w = self.weights
            checked = self.weight_check(base=base_sent, sync=w.num_syncs, version=w.actor_version)
            # not the verified count: the first check after a start or resume covers the base too
            metrics["perf/weight_sync_unverified_params"] = checked["perf/weight_sync_unverified_params"]
            w.checked()
            metrics["timing_s/weight_sync_verify"] = time.perf_counter() - start
        return metrics

    def _release_rollout(self) -> None:
        """Before an engine phase: the rollout's device memory goes (it may have stayed after a generate)."""
        if self.has_actor and not self.separate:
            self.weights.before_engine_phase()

    @register(Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """meta_info: validate (val_kwargs sampling) or greedy_baseline (ReMax: one greedy response);
        agent_loop: run the rows through their agent loops (multi-turn, agent_loop/runner.py);
        generate_follows: the driver's next call here is another generate and nothing else uses the
        device before it, so the rollout keeps its memory (and its weights) until then."""
        validate = prompts.meta_info.get("validate", False)
        baseline = prompts.meta_info.get("greedy_baseline", False)
        if not validate and not baseline:
            dev.reset_peak_memory()  # a training step starts here; update_actor reports its peak
        metrics = self._sync_rollout_weights()
        params = self._sampling(validate)
        if baseline:
            params = dataclasses.replace(params, n=1, do_sample=False)
        start = time.perf_counter()
        if prompts.meta_info.get("agent_loop"):
            out = self._agent_loop_runner().run(prompts, params)
            metrics.update(out.meta_info.pop("metrics"))
        else:
            out = self._generate_single_turn(prompts, params)
        self.weights.after_generate(prompts.meta_info.get("generate_follows", False))
        seconds = time.perf_counter() - start
        metrics["timing_s/generate_local"] = seconds
        metrics["perf/rollout_tokens_per_s"] = float(out.batch["response_mask"].sum()) / max(seconds, 1e-9)
        out.meta_info["metrics"] = metrics
        return out

    @register(Dispatch.ONE_PER_RANK)
    def generate_round(self, requests: list[tuple[list[int], int, int]]) -> dict:
        """One round of colocate_async's partial rollouts (trainer/colocate_async.py): this rank's
        requests, each (prompt ids + the tokens its trajectory has so far, the tokens to generate at
        most, its key), in one engine call on the actor's current weights (synced first when the
        actor moved). The rollout keeps its memory for the next round; the next phase of the actor
        releases it."""
        metrics = self._sync_rollout_weights()
        start = time.perf_counter()
        results = generate_round(self.rollout, requests, self._sampling(validate=False))
        self.weights.after_generate(True)
        metrics["timing_s/generate_local"] = time.perf_counter() - start
        return {"results": results, "metrics": metrics}

    @register(Dispatch.ONE_PER_RANK)
    def agent_round(self, work: tuple) -> dict:
        """One round of colocate_async's multi-turn trajectories (agent_loop/rounds.py): `work` is
        (the new prompt groups placed here or None, their trajectories' ids, the round's tokens per
        trajectory), on the actor's current weights (synced first when the actor moved)."""
        metrics = self._sync_rollout_weights()
        out = self._agent_rounds(work[2]).round(work[0], work[1])
        self.weights.after_generate(True)
        out["metrics"].update(metrics)
        return out

    def _agent_rounds(self, chunk: int):
        if self.agent_rounds is None:
            from verl_lite.agent_loop.rounds import AgentRounds

            self.agent_rounds = AgentRounds(self._agent_loop_runner(), self._sampling(False), chunk)
        return self.agent_rounds

    @register(Dispatch.ONE_TO_ALL)
    def export_weights(self, weights_loaded: bool) -> dict:
        """verl 0.9's separate_async (trainer/separate_async.py): the actor's weights as the hybrid
        engine's sync sends them -- all of them, or with LoRA the adapter (and the base while the
        rollout group's engines hold none, `weights_loaded`) -- into the Outbox this worker holds in
        place of a rollout, for the standalone rollout group; which parts its check covers (`base`,
        `adapter`). Every rank takes part in the gathers; rank 0's result holds the tensors."""
        if self.num_exports == 0:
            self.outbox.weights_loaded = weights_loaded
        start = time.perf_counter()
        stats = self.weight_sync()
        lora = self.weight_check.lora
        base = not lora or self.num_exports == 0 or bool(stats.get("base_sent", 0.0))  # the first: all
        self.num_exports += 1
        sent = self.outbox.take()
        return {  # rank 0's tensors into Ray's object store once: the rollout ranks read them there
            "sent": ray.put(sent) if self.rank == 0 else None,
            "base": base,
            "adapter": lora,
            "metrics": {
                "timing_s/update_weights": time.perf_counter() - start,
                "perf/update_weights_gb": stats["update_weights_gb"],
                "perf/update_weights_collectives": stats["update_weights_collectives"],
            },
        }

    @register(Dispatch.ONE_TO_ALL)
    def expected_weights(self, landed: dict, base: bool, adapter: bool):
        """The trainer's side of the rollout group's check after a load (rollout/weight_check.py), for
        the engine parameters `landed` describes, from the actor's shards (every rank together)."""
        return self.weight_check.expected(landed, base=base, adapter=adapter)

    def _agent_loop_runner(self):
        if self.agent_loops is None:
            from verl_lite.agent_loop.runner import AgentLoopRunner
            from verl_lite.utils.hf_model import model_vocab_size

            engine = next(iter(self.engines.values()), None)  # none on a rollout-only worker
            config = getattr(getattr(engine, "module", None), "config", None)
            self.agent_loops = AgentLoopRunner(
                self.rollout,
                self.tokenizer,
                self.config.rollout,
                self.chat_template_kwargs,
                vocab_size=model_vocab_size(self.config.model, self.tokenizer, config),  # ids must fit it
                trainer_config=self.trainer_config,
                hf_model_type=getattr(config, "model_type", None),
            )
        return self.agent_loops

    def _generate_single_turn(self, prompts: DataProto, params: SamplingParams) -> DataProto:
        out = generate_single_turn(self.rollout, prompts.batch, params, self.tokenizer.pad_token_id)
        return DataProto.from_dict(out)

    # --- log-probs ----------------------------------------------------------------------------------
    def _log_prob(self, role: str, data: DataProto, source, phase: str, fn=compute_log_prob):
        """`source`: the config section with log_prob_* micro-batch keys (rollout for the actor, ref)."""
        return fn(
            self.engines[role],
            data.batch,
            micro_size=source.log_prob_micro_batch_size_per_gpu,
            max_token_len=source.log_prob_max_token_len_per_gpu if source.log_prob_use_dynamic_bsz else None,
            temperature=self.config.rollout.temperature,
            phase=phase,
        )

    @register(Dispatch.DP_COMPUTE_PROTO, mesh="actor")
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """old_log_probs; with actor.calculate_sum_pi_squared also sum_pi_squared (optimal_token_baseline)."""
        self._release_rollout()
        if not self.config.actor.calculate_sum_pi_squared:
            return DataProto.from_dict(
                {"old_log_probs": self._log_prob("actor", data, self.config.rollout, "compute_log_prob")}
            )
        logp, sum_pi_squared = self._log_prob(
            "actor", data, self.config.rollout, "compute_log_prob", compute_log_prob_and_sum_pi_squared
        )
        return DataProto.from_dict({"old_log_probs": logp, "sum_pi_squared": sum_pi_squared})

    @register(Dispatch.DP_COMPUTE_PROTO, mesh="actor")
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        self._release_rollout()
        with self.ref_policy():  # the ref engine as it is, or the actor with its adapters off
            logp = self._log_prob(self.ref_role, data, self.config.ref, "compute_ref_log_prob")
        return DataProto.from_dict({"ref_log_prob": logp})

    # --- update ---------------------------------------------------------------------------------------
    @register(Dispatch.DP_COMPUTE_PROTO, mesh="actor")
    def compute_log_probs(self, data: DataProto) -> DataProto:
        """compute_log_prob and, when this worker holds the reference, compute_ref_log_prob: the two
        passes that always follow each other, in one call."""
        out = self.compute_log_prob(data)
        if self.has_ref:
            out = out.union(self.compute_ref_log_prob(data))
        return out

    @register(Dispatch.DP_COMPUTE_PROTO, mesh="actor")
    def update_actor(self, data: DataProto) -> DataProto:
        """The PPO update. Without `old_log_probs` in `data` (the driver sends none when nothing
        before the update reads them) the first mini-batch's come from the update's own forward and
        the other rows' from a pass here, before any step; all are returned. Without `ref_log_prob`
        under use_kl_loss the reference pass runs here first, in the same call."""
        self._release_rollout()
        a, n = self.config.actor, self.config.rollout.n
        batch = dict(data.batch)
        if a.use_kl_loss and "ref_log_prob" not in batch:
            batch["ref_log_prob"] = self.compute_ref_log_prob(data).batch["ref_log_prob"]
        out = {}
        mini_local = a.ppo_mini_batch_size * n // self.engines["actor"].dp_size
        if "old_log_probs" in batch:
            metrics = self.actor.update(batch, mini_local, a.ppo_micro_batch_size_per_gpu)
        else:
            if (
                len(data) > mini_local
            ):  # the rows after the first mini-batch: before any step moves the weights
                rest = DataProto.from_dict({k: v[mini_local:] for k, v in batch.items()})
                old = self._log_prob("actor", rest, self.config.rollout, "compute_log_prob")
                batch["old_log_probs"] = torch.cat([old.new_zeros((mini_local, old.shape[1])), old])
            metrics, out["old_log_probs"] = self.actor.update_own_first(
                batch, mini_local, a.ppo_micro_batch_size_per_gpu
            )
        self.weights.actor_moved()
        metrics.update(self._step_report())
        return DataProto.from_dict(out, meta_info={"metrics": metrics})

    # --- checkpoints ---------------------------------------------------------------------------------
    @register(Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path: str, global_step: int = 0) -> None:
        """The actor's state (engine + the rollout's sampling state) into `local_path`, on every rank
        together; the driver commits the folder. The reference is frozen and is not saved."""
        self._release_rollout()
        extra = {"global_step": global_step}
        if not self.separate:  # the rollout's sampling state (separate_async: the rollout group's own)
            extra["rollout"] = self.rollout.state_dict()
        contents = self.config.actor.checkpoint.save_contents
        save_engine(self.engines["actor"], local_path, contents, extra=extra, tokenizer=self.tokenizer)

    @register(Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str) -> None:
        self._release_rollout()
        extra = load_engine(self.engines["actor"], local_path, self.config.actor.checkpoint.load_contents)
        if "rollout" in extra and not self.separate:
            self.rollout.load_state_dict(extra["rollout"])
        self.weights.actor_moved()  # the rollout still holds the weights it was built with

    def _step_report(self) -> dict[str, float]:
        """Engine timings, offload traffic, and memory since the previous report."""
        out: dict[str, float] = {}
        transfers = {}
        for role, engine in self.engines.items():
            engine_metrics, transfers[role] = engine.pop_metrics()
            out.update(engine_metrics)
        out.update(offload_metrics(transfers))
        # 0 with LoRA: the reference is the actor with its adapters off
        out["perf/ref_engines"] = int("ref" in self.engines)
        out.update({f"perf/{k}": v for k, v in dev.memory_stats_gb().items()})
        out["perf/cpu_memory_used_gb"] = psutil.virtual_memory().used / GB
        out["perf/cpu_memory_rss_gb"] = psutil.Process(os.getpid()).memory_info().rss / GB
        total = dev.device_memory_total_gb()
        if dev.has_accelerator():
            out["perf/device_memory_total_gb"] = total
            util = dev.device_utilization()
            if util is not None:
                out["perf/device_utilization"] = util
            if not hasattr(self, "link_peak_gbps"):  # measured once: the health check's reference
                self.link_peak_gbps = dev.measure_link_gbps()
            out["perf/link_peak_gbps"] = self.link_peak_gbps
        return out

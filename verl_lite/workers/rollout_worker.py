"""RolloutWorker: one Ray actor per rank of verl 0.9's standalone rollout group (separate_async).

Under `trainer.v1.trainer_mode=separate_async` the rollout has devices of its own
(`actor_rollout_ref.rollout.nnodes` x `n_gpus_per_node`): these workers hold only a rollout engine
(vLLM or HF, the backend the run names, built from model.path like the hybrid engine's), generate
the replay buffer's trajectories in rounds while the trainer group updates
(trainer/separate_async.py), and load the trainer's weights when the driver hands them over. Every
load is checked where the weights landed against the trainer's fingerprints
(rollout/weight_check.py, compared on the driver): a sync that did not arrive stops the run with
one line naming the parameter. Validation generates here too (the trainer's workers hold no rollout
in this mode). The engine never sleeps: nothing else uses these devices.
"""

from __future__ import annotations

import time

from verl_lite.config.schema import ActorRolloutRefConfig
from verl_lite.protocol import DataProto
from verl_lite.rollout import build_rollout
from verl_lite.rollout.base import generate_round, generate_single_turn, sampling_params
from verl_lite.rollout.weight_sync import deliver
from verl_lite.single_controller import Dispatch, Worker, register
from verl_lite.utils.hf_model import load_tokenizer


class RolloutWorker(Worker):
    def __init__(
        self,
        config: ActorRolloutRefConfig,
        dist_timeout_s: int = 600,
        chat_template_kwargs: dict | None = None,
        trainer_config=None,
    ):
        """`chat_template_kwargs` and `trainer_config`: what the agent loops get (as on the hybrid
        engine's workers, workers/actor_rollout_ref.py)."""
        super().__init__()
        self.config, self.dist_timeout_s = config, dist_timeout_s
        self.chat_template_kwargs, self.trainer_config = dict(chat_template_kwargs or {}), trainer_config
        self.agent_loops = self.agent_rounds = None  # built at the first multi-turn round or validation

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self) -> dict:
        """The rollout engine, in this group's own process group (vLLM joins it as the hybrid
        engine's does the trainer's). Returns whether it holds weights (vLLM's load_format=dummy: not
        until the first sync)."""
        self.init_distributed(self.dist_timeout_s)
        cfg = self.config
        self.tokenizer = load_tokenizer(
            cfg.model.tokenizer_path or cfg.model.path,
            cfg.model.trust_remote_code,
            cfg.model.custom_chat_template,
        )
        self.rollout = build_rollout(cfg.rollout.name, cfg.model, cfg.rollout, self.tokenizer, self.rank)
        self.params = sampling_params(cfg.rollout, validate=False)
        return {"weights_loaded": self.rollout.weights_loaded}

    @register(Dispatch.ONE_PER_RANK)
    def generate_round(self, requests: list[tuple[list[int], int, int]]) -> dict:
        """One round of separate_async's partial rollouts on the weights this engine holds."""
        start = time.perf_counter()
        results = generate_round(self.rollout, requests, self.params)
        return {"results": results, "metrics": {"timing_s/generate_local": time.perf_counter() - start}}

    @register(Dispatch.ONE_PER_RANK)
    def agent_round(self, work: tuple) -> dict:
        """One round of separate_async's multi-turn trajectories (agent_loop/rounds.py): `work` is
        (the new prompt groups placed here or None, their trajectories' ids, the round's tokens per
        trajectory)."""
        if self.agent_rounds is None:
            from verl_lite.agent_loop.rounds import AgentRounds

            self.agent_rounds = AgentRounds(self._agent_loop_runner(), self.params, work[2])
        return self.agent_rounds.round(work[0], work[1])

    @register(Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Validation (meta_info validate: val_kwargs sampling; agent_loop: through the rows' agent
        loops) on the weights this engine holds, the trainer's latest: under separate_async the
        trainer holds no rollout of its own."""
        params = sampling_params(self.config.rollout, prompts.meta_info.get("validate", False))
        if prompts.meta_info.get("agent_loop"):
            return self._agent_loop_runner().run(prompts, params)
        out = generate_single_turn(self.rollout, prompts.batch, params, self.tokenizer.pad_token_id)
        return DataProto.from_dict(out)

    def _agent_loop_runner(self):
        if self.agent_loops is None:
            from verl_lite.agent_loop.runner import AgentLoopRunner
            from verl_lite.utils.hf_model import model_config, model_vocab_size

            config = model_config(self.config.model, "actor_rollout_ref.model", "causal_lm")
            self.agent_loops = AgentLoopRunner(
                self.rollout,
                self.tokenizer,
                self.config.rollout,
                self.chat_template_kwargs,
                vocab_size=model_vocab_size(self.config.model, self.tokenizer, config),
                trainer_config=self.trainer_config,
                hf_model_type=getattr(config, "model_type", None),
            )
        return self.agent_loops

    @register(Dispatch.ONE_TO_ALL)
    def load_weights(self, sent: list, base: bool, adapter: bool) -> dict:
        """The trainer's weights (workers/actor_rollout_ref.export_weights) into the engine, and its
        parameters read back where they landed (the base and/or the adapter: `base`, `adapter`), for
        the check against the trainer's (rollout/weight_check.compare, on the driver)."""
        start = time.perf_counter()
        stats = deliver(sent, self.rollout)
        loaded = time.perf_counter()
        landed = self.rollout.landed_fingerprints(base=base, adapter=adapter)
        metrics = {
            "separate_async/load_weights_s": loaded - start,
            "separate_async/load_weights_gb": stats["update_weights_gb"],
            "separate_async/read_back_s": time.perf_counter() - loaded,
        }
        return {"landed": landed, "metrics": metrics}

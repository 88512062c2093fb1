"""The PPO critic: a value model on an FSDP2 engine, and the worker that serves it over Ray.

The value model is the LM backbone with a scalar head per position (utils/hf_model.py). The value
of response token t is read at the position that predicts it, P + t - 1, exactly where the actor
reads that token's logits: V(s_t) is the value of the state before token t is generated (verl's
layout). Values are zero on padding.

The update is PPO's clipped value loss (algos/value_loss.py), aggregated like the actor's: every
micro-batch's loss is its share of the mini-batch loss under counts over the whole mini-batch on
all ranks (LossScale), so any micro-batch split, offload mode or world size gives the same update.
The engine is the only place that knows FSDP2 and offload; this module adapts tensors and DataProto.
"""

from __future__ import annotations

import torch

from verl_lite.algos.loss_agg import LossScale, agg_loss
from verl_lite.algos.value_loss import compute_value_loss_terms
from verl_lite.config.schema import CriticConfig
from verl_lite.engine.checkpoint import load_engine, save_engine
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.engine.mesh import build_layout
from verl_lite.engine.transfers import offload_metrics
from verl_lite.protocol import DataProto
from verl_lite.single_controller import Dispatch, Worker, register
from verl_lite.utils import device as dev
from verl_lite.workers.actor import MODEL_INPUTS


def response_values(output, micro) -> torch.Tensor:
    """(bs, R') values of the states before each response token, masked to the response."""
    width = micro["responses"].shape[1]
    values = output.logits[:, -width - 1 : -1, 0].float()
    return values * micro["response_mask"]


class PPOCritic:
    def __init__(self, engine: FSDPEngine, cfg: CriticConfig, response_length: int):
        self.engine, self.cfg, self.response_length = engine, cfg, response_length

    def compute_values(self, tensors: dict[str, torch.Tensor], micro_size: int, max_token_len: int | None):
        """(bs, R) values in the rows' original order."""
        inputs = {k: tensors[k] for k in (*MODEL_INPUTS, "response_mask")}
        return self.engine.forward(
            inputs,
            response_values,
            micro_size=micro_size,
            max_token_len=max_token_len,
            phase="compute_values",
        )

    def loss(self, output, micro, scale: LossScale):
        """This micro-batch's share of the mini-batch value loss, and the metric shares."""
        cfg = self.cfg
        mask = micro["response_mask"].float()
        vpreds = response_values(output, micro)
        terms = compute_value_loss_terms(vpreds, micro["values"], micro["returns"], cfg.cliprange_value)
        vf_loss = agg_loss(terms["vf_loss"], mask, cfg.loss_agg_mode, scale)
        shares = {
            "vf_loss": vf_loss,
            "vf_clipfrac": agg_loss(terms["vf_clipped"], mask, "token-mean", scale),
            "vpred_mean": agg_loss(vpreds, mask, "token-mean", scale),
        }
        return vf_loss, shares

    def update(self, tensors: dict[str, torch.Tensor], mini_size: int, micro_size: int | None):
        """ppo_epochs passes, one optimizer step per local mini-batch of `mini_size` rows (the driver
        orders rows so that local mini-batch j of every rank together form global mini-batch j)."""
        cfg = self.cfg
        keys = [*MODEL_INPUTS, "response_mask", "values", "returns"]
        metrics = self.engine.update(
            {k: tensors[k] for k in keys},
            self.loss,
            mini_size=mini_size,
            micro_size=micro_size,
            max_token_len=cfg.ppo_max_token_len_per_gpu if cfg.use_dynamic_bsz else None,
            epochs=cfg.ppo_epochs,
            response_length=self.response_length,
        )
        return {f"critic/{k}": v for k, v in metrics.items()}


class CriticWorker(Worker):
    """One Ray actor per rank holding a shard of the value model (its own process group)."""

    def __init__(
        self,
        config: CriticConfig,
        response_length: int,
        rollout_n: int,
        dist_timeout_s: int = 600,
    ):
        super().__init__()
        self.config, self.response_length, self.rollout_n = config, response_length, rollout_n
        self.dist_timeout_s = dist_timeout_s

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self) -> dict:
        self.init_distributed(self.dist_timeout_s)
        c = self.config
        layout = build_layout(
            dev.device_type(), c.fsdp.fsdp_size, c.ulysses_sequence_parallel_size, key="critic"
        )
        self.engine = FSDPEngine(
            c.model,
            c.fsdp,
            layout,
            role="critic",
            optim_cfg=c.optim,
            grad_clip=c.grad_clip,
            model_kind="value",
            sp_key="critic.ulysses_sequence_parallel_size",
        )
        self.critic = PPOCritic(self.engine, c, self.response_length)
        return {"num_params": self.engine.num_params()}

    @register(Dispatch.DP_COMPUTE_PROTO, mesh="critic")
    def compute_values(self, data: DataProto) -> DataProto:
        c = self.config
        max_tokens = c.forward_max_token_len_per_gpu if c.use_dynamic_bsz else None
        values = self.critic.compute_values(data.batch, c.forward_micro_batch_size_per_gpu, max_tokens)
        return DataProto.from_dict({"values": values})

    @register(Dispatch.DP_COMPUTE_PROTO, mesh="critic")
    def update_critic(self, data: DataProto) -> DataProto:
        c = self.config
        mini_local = c.ppo_mini_batch_size * self.rollout_n // self.engine.dp_size
        metrics = self.critic.update(data.batch, mini_local, c.ppo_micro_batch_size_per_gpu)
        engine_metrics, transfers = self.engine.pop_metrics()
        metrics.update(engine_metrics)
        # only the per-role moves: the totals (perf/offload/h2d_gb, ...) are the actor worker's
        moves = offload_metrics({"critic": transfers})
        metrics.update({k: v for k, v in moves.items() if k.startswith("perf/offload/critic/")})
        return DataProto(meta_info={"metrics": metrics})

    @register(Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path: str, global_step: int = 0) -> None:
        """The value model's state into `local_path`, on every rank together; the driver commits."""
        extra = {"global_step": global_step}
        save_engine(self.engine, local_path, self.config.checkpoint.save_contents, extra=extra)

    @register(Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str) -> None:
        load_engine(self.engine, local_path, self.config.checkpoint.load_contents)

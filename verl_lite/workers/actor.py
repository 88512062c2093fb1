"""The PPO actor on top of an engine: log-probs of responses and the clipped policy update.

Batch layout (verl's): input_ids = [prompt | response], responses (bs, R), response_mask (bs, R).
The logits that score response token t sit at position P + t - 1, so the response's logits are the
last R+1 positions but one. Logits are divided by the rollout temperature, so log-probs are those of
the distribution the rollout sampled from.

The update keeps accumulation exact: for each mini-batch it counts tokens and sequences over all
ranks first (one all-reduce), and every micro-batch's loss is that micro-batch's share of the
mini-batch loss under those counts (algos/loss_agg.py).
"""

from __future__ import annotations

from collections import defaultdict

import torch

from verl_lite.algos import POLICY_LOSSES
from verl_lite.algos.kl import kl_penalty
from verl_lite.algos.logprob import entropy_from_logits, logprobs_from_logits, sum_pi_squared_from_logits
from verl_lite.algos.loss_agg import LossScale, agg_loss
from verl_lite.config.schema import ActorConfig
from verl_lite.engine.fsdp_engine import FSDPEngine

MODEL_INPUTS = ("input_ids", "attention_mask", "position_ids", "responses")
LOSS_METRICS = {"clipped": "pg_clipfrac", "clipped_lower": "pg_clipfrac_lower", "approx_kl": "ppo_kl"}


def take(tensors: dict[str, torch.Tensor], rows: list[int]) -> dict[str, torch.Tensor]:
    index = torch.tensor(rows)
    return {k: v[index] for k, v in tensors.items()}


def response_logits(output, micro, temperature: float) -> torch.Tensor:
    width = micro["responses"].shape[1]
    return output.logits[:, -width - 1 : -1].float() / temperature  # (bs, R, vocab)


def _response_token_stats(
    engine: FSDPEngine,
    tensors: dict[str, torch.Tensor],
    with_sum_pi_squared: bool,
    *,
    micro_size: int,
    max_token_len: int | None,
    temperature: float,
    phase: str,
) -> torch.Tensor:
    """(S, bs, R) per response token, rows in their original order: log-probs of the sampled tokens
    and, when asked, sum_v pi_v^2 (optimal_token_baseline's input). `max_token_len` (dynamic batching)
    groups rows by a token budget instead of `micro_size`."""

    def fn(output, micro):
        logits = response_logits(output, micro, temperature)
        stats = [logprobs_from_logits(logits, micro["responses"].to(logits.device))]
        if with_sum_pi_squared:
            stats.append(sum_pi_squared_from_logits(logits))
        return torch.stack(stats).cpu()

    inputs = {k: tensors[k] for k in MODEL_INPUTS}
    groups = engine.micro_batches(inputs["attention_mask"], micro_size, max_token_len)
    outs = engine.forward([take(inputs, g) for g in groups], fn, phase=phase)
    stats = torch.empty((1 + with_sum_pi_squared, *inputs["responses"].shape), dtype=torch.float32)
    for rows, out in zip(groups, outs):
        stats[:, torch.tensor(rows)] = out
    return stats


def compute_log_prob(engine: FSDPEngine, tensors: dict[str, torch.Tensor], **kw) -> torch.Tensor:
    """Log-probs of the sampled response tokens, (bs, R); keywords as _response_token_stats."""
    return _response_token_stats(engine, tensors, False, **kw)[0]


def compute_log_prob_and_sum_pi_squared(
    engine: FSDPEngine, tensors: dict[str, torch.Tensor], **kw
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and sum_v pi_v^2 of each response token, both (bs, R), from one forward."""
    logp, sum_pi_squared = _response_token_stats(engine, tensors, True, **kw)
    return logp, sum_pi_squared


def mini_batch_loss_scale(engine: FSDPEngine, mask: torch.Tensor, response_length: int) -> LossScale:
    """Token and sequence counts of this rank's part of the mini-batch, summed over ranks: the
    denominators every micro-batch's loss share uses (actor and critic alike)."""
    local = torch.tensor([mask.sum(), (mask.sum(-1) > 0).sum()], dtype=torch.float64)
    num_tokens, num_seqs = engine.dp_all_reduce_sum(local).tolist()
    return LossScale(num_tokens=num_tokens, num_seqs=num_seqs, response_length=response_length)


class PPOActor:
    def __init__(self, engine: FSDPEngine, cfg: ActorConfig, response_length: int, temperature: float):
        self.engine, self.cfg = engine, cfg
        self.response_length, self.temperature = response_length, temperature
        spec = POLICY_LOSSES.spec(cfg.policy_loss.loss_mode)
        self.policy_loss, self.policy_loss_kwargs = spec.fn, POLICY_LOSSES.read_keys(spec, cfg)
        self.pg_agg_mode = spec.agg_mode or cfg.loss_agg_mode  # gspo, sapo, geo_mean fix theirs (as verl)

    def loss_scale(self, mask: torch.Tensor) -> LossScale:
        return mini_batch_loss_scale(self.engine, mask, self.response_length)

    def make_loss_fn(self, scale: LossScale):
        cfg = self.cfg

        def loss_fn(output, micro):
            device = output.logits.device
            mask = micro["response_mask"].to(device).float()
            logits = response_logits(output, micro, self.temperature)
            logp = logprobs_from_logits(logits, micro["responses"].to(device))
            terms = self.policy_loss(
                old_log_prob=micro["old_log_probs"].to(device),
                log_prob=logp,
                advantages=micro["advantages"].to(device),
                response_mask=mask,
                **self.policy_loss_kwargs,
            )
            pg_loss = agg_loss(terms["pg_loss"], mask, self.pg_agg_mode, scale)
            entropy = agg_loss(entropy_from_logits(logits), mask, cfg.loss_agg_mode, scale)
            loss = pg_loss - cfg.entropy_coeff * entropy
            shares = {"pg_loss": pg_loss, "entropy": entropy}
            for term, metric in LOSS_METRICS.items():  # the indicators this loss reports
                if term in terms:
                    shares[metric] = agg_loss(terms[term], mask, "token-mean", scale)
            if cfg.use_kl_loss:
                kl = kl_penalty(logp, micro["ref_log_prob"].to(device), cfg.kl_loss_type)
                shares["kl_loss"] = agg_loss(kl, mask, cfg.loss_agg_mode, scale)
                loss = loss + cfg.kl_loss_coef * shares["kl_loss"]
            return loss, shares

        return loss_fn

    def update(
        self, tensors: dict[str, torch.Tensor], mini_size: int, micro_size: int | None
    ) -> dict[str, float]:
        """ppo_epochs passes over this rank's rows, one optimizer step per mini-batch.

        `mini_size` is this rank's share of a mini-batch (ppo_mini_batch_size * n / dp_size); the
        driver orders rows so that local mini-batch j of every rank together form global mini-batch j.
        """
        keys = [*MODEL_INPUTS, "response_mask", "old_log_probs", "advantages"]
        if self.cfg.use_kl_loss:
            keys.append("ref_log_prob")
        data = {k: tensors[k] for k in keys}
        num_rows = data["responses"].shape[0]
        max_tokens = self.cfg.ppo_max_token_len_per_gpu if self.cfg.use_dynamic_bsz else None
        history: dict[str, list[float]] = defaultdict(list)
        with self.engine.phase("update"):  # one phase: offloaded params come in once for all mini-batches
            for _ in range(self.cfg.ppo_epochs):
                for start in range(0, num_rows, mini_size):
                    mini = {k: v[start : start + mini_size] for k, v in data.items()}
                    scale = self.loss_scale(mini["response_mask"])
                    groups = self.engine.micro_batches(mini["attention_mask"], micro_size, max_tokens)
                    metrics = self.engine.train_mini_batch(
                        [take(mini, g) for g in groups], self.make_loss_fn(scale)
                    )
                    for k, v in metrics.items():
                        history[k].append(v)
        self.engine.end_training_step()
        out = {f"actor/{k}": sum(v) / len(v) for k, v in history.items()}
        if self.cfg.use_kl_loss:
            out["actor/kl_coef"] = self.cfg.kl_loss_coef
        return out

"""The PPO actor on top of an engine: its log-prob head and its clipped policy loss.

Batch layout (verl's): input_ids = [prompt | response], responses (bs, R), response_mask (bs, R).
The engine runs the loops (fsdp_engine.py), cuts every micro-batch to the response columns it needs
(micro.width <= R) and gives per response token what a `TokenRequest` asks for: log-probs (and the
entropy) of softmax(logits / temperature), with the rollout's temperature, so log-probs are those
of the distribution the rollout sampled from. This module says what one micro-batch computes from
them; it never sees logits, so fused or sequence-parallel forwards need nothing here.

The update keeps accumulation exact: every micro-batch's loss is its share of the mini-batch loss
under the mini-batch-wide counts the engine passes in (`scale`, algos/loss_agg.py).

Rollout correction (algorithm.rollout_correction, algos/rollout_corr.py): in decoupled mode the
trainer's IS weights scale the policy loss's per-token terms (per sequence for geo_mean) and rejected
tokens arrive masked; in bypass mode the old log-probs are the rollout's and the loss is
algos/policy_loss_bypass.py's, whose correction is computed per micro-batch from the current policy
(rollout_is_batch_normalize then averages over the micro-batch on every rank, as verl's, so only that
option depends on the micro-batch split). rollout_corr/* metrics of the current policy are the mean
over micro-batches, as verl reports them.

No separate old-log-prob pass is needed for rows nothing has moved the weights for: the first
mini-batch of the first epoch runs on the weights of the old policy (the rollout's in the sync mode;
the actor's own under the async modes, verl's decoupled old policy), so `update_own_first` takes its old
log-probs from the update's own forward, detached (the ratio is 1 and its gradient that of log pi),
keeps them for the later epochs and returns them. The other rows' old log-probs come from a pass
before the update (the worker runs it in the same call). With one mini-batch and one epoch (verl's
`on_policy`) that pass is empty.
"""

from __future__ import annotations

import torch

from verl_lite.algos import POLICY_LOSSES
from verl_lite.algos.kl import kl_penalty
from verl_lite.algos.loss_agg import LossScale, agg_loss
from verl_lite.algos.policy_loss_bypass import compute_bypass_terms
from verl_lite.algos.rollout_corr import PREFIX, offpolicy_metrics, prefixed, weighted_pg_loss
from verl_lite.config.schema import ActorConfig
from verl_lite.engine.forward import TokenRequest
from verl_lite.engine.fsdp_engine import FSDPEngine

MODEL_INPUTS = ("input_ids", "attention_mask", "position_ids", "responses")
LOSS_METRICS = {"clipped": "pg_clipfrac", "clipped_lower": "pg_clipfrac_lower", "approx_kl": "ppo_kl"}


def _response_token_stats(
    engine: FSDPEngine,
    tensors: dict[str, torch.Tensor],
    with_sum_pi_squared: bool,
    *,
    micro_size: int | None,
    max_token_len: int | None,
    temperature: float,
    phase: str,
) -> torch.Tensor:
    """(bs, R, S) per response token, rows in their original order (0 where a micro-batch has only
    padding left): log-probs of the sampled tokens and, when asked, sum_v pi_v^2
    (optimal_token_baseline's input), from one forward. `max_token_len` (dynamic batching) groups
    rows by a token budget instead of `micro_size`."""
    names = ("log_probs", "sum_pi_squared") if with_sum_pi_squared else ("log_probs",)
    inputs = {k: tensors[k] for k in MODEL_INPUTS}
    return engine.forward(
        inputs,
        lambda output, micro: torch.stack([output.tokens[n] for n in names], -1),
        micro_size=micro_size,
        max_token_len=max_token_len,
        phase=phase,
        request=TokenRequest(temperature=temperature, sum_pi_squared=with_sum_pi_squared),
    )


def compute_log_prob(engine: FSDPEngine, tensors: dict[str, torch.Tensor], **kw) -> torch.Tensor:
    """Log-probs of the sampled response tokens, (bs, R); keywords as _response_token_stats."""
    return _response_token_stats(engine, tensors, False, **kw)[..., 0]


def compute_log_prob_and_sum_pi_squared(
    engine: FSDPEngine, tensors: dict[str, torch.Tensor], **kw
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and sum_v pi_v^2 of each response token, both (bs, R), from one forward."""
    stats = _response_token_stats(engine, tensors, True, **kw)
    return stats[..., 0], stats[..., 1]


def norm_length(cfg: ActorConfig, response_length: int) -> int:
    """seq-mean-token-sum-norm's constant divisor: actor.loss_scale_factor, else the response length."""
    return cfg.loss_scale_factor or response_length


class PPOActor:
    def __init__(
        self,
        engine: FSDPEngine,
        cfg: ActorConfig,
        response_length: int,
        temperature: float,
        rollout_correction=None,
        local_updates: bool = False,
    ):
        """`rollout_correction`: algorithm.rollout_correction; its bypass mode replaces the policy loss
        (algos/policy_loss_bypass.py). Decoupled mode's weights arrive with the batch.
        `local_updates`: verl 0.9's separate_async, where each mini-batch is an update of its own
        (engine.update's `local_updates`)."""
        self.engine, self.cfg, self.local_updates = engine, cfg, local_updates
        self.response_length, self.temperature = response_length, temperature
        spec = POLICY_LOSSES.spec(cfg.policy_loss.loss_mode)
        self.policy_loss, self.policy_loss_kwargs = spec.fn, POLICY_LOSSES.read_keys(spec, cfg)
        self.pg_agg_mode = spec.agg_mode or cfg.loss_agg_mode  # gspo, sapo, geo_mean fix theirs (as verl)
        self.is_weights_per = spec.is_weights
        self.correction = rollout_correction
        self.bypass = bool(rollout_correction is not None and rollout_correction.bypass_mode)
        # what the update's forward gives per token: log-probs, and the entropy (actor/entropy), which
        # needs a gradient only when it is part of the loss
        self.request = TokenRequest(
            temperature=temperature, entropy=True, entropy_grad=cfg.entropy_coeff != 0
        )

    def loss(self, output, micro, scale: LossScale, kept: dict | None = None):
        """This micro-batch's share of the mini-batch loss, and the metric shares (only the
        indicators the policy loss reports). `kept`: the first mini-batch's old log-probs are its
        forward's in epoch 0, detached, kept under the micro-batch's rows for the later epochs."""
        cfg = self.cfg
        mask = micro["response_mask"].float()
        logp = output.tokens["log_probs"]
        if kept is None or micro.mini_batch != 0:
            old = micro["old_log_probs"]
        elif micro.epoch == 0:
            old = kept[tuple(micro.plan.rows.tolist())] = logp.detach()
        else:
            old = kept[tuple(micro.plan.rows.tolist())]
        terms, pg_mask, corrections = self._policy_terms(old, logp, micro, mask)
        pg_loss = agg_loss(terms["pg_loss"], pg_mask, self.pg_agg_mode, scale)
        entropy = agg_loss(output.tokens["entropy"], mask, cfg.loss_agg_mode, scale)
        # without a bonus the entropy is only reported: no autograd graph (self.request), no 0 * term
        loss = pg_loss - cfg.entropy_coeff * entropy if cfg.entropy_coeff else pg_loss
        shares = {"pg_loss": pg_loss, "entropy": entropy}
        for term, metric in LOSS_METRICS.items():
            if term in terms:
                shares[metric] = agg_loss(terms[term], pg_mask, "token-mean", scale)
        shares.update(self._mean_shares(corrections, micro, logp.device))
        if cfg.use_kl_loss:
            kl = kl_penalty(logp, micro["ref_log_prob"], cfg.kl_loss_type)
            shares["kl_loss"] = agg_loss(kl, mask, cfg.loss_agg_mode, scale)
            loss = loss + cfg.kl_loss_coef * shares["kl_loss"]
        return loss, shares

    def _policy_terms(self, old, logp, micro, mask):
        """(the policy loss's per-token terms, the mask pg_loss aggregates over, rollout_corr/ metrics
        of this micro-batch): bypass mode's loss, or the configured one scaled by decoupled mode's IS
        weights, with the off-policy metrics of the current policy when the rollout's log-probs came."""
        if self.bypass:
            clip = {k: getattr(self.cfg, k) for k in ("clip_ratio_low", "clip_ratio_high", "clip_ratio_c")}
            return compute_bypass_terms(
                logp, old, micro["advantages"], mask, self.correction, clip, self._dp_mean
            )
        terms = self.policy_loss(
            old_log_prob=old,
            log_prob=logp,
            advantages=micro["advantages"],
            response_mask=mask,
            **self.policy_loss_kwargs,
        )
        if "rollout_is_weights" in micro:
            terms["pg_loss"] = weighted_pg_loss(
                terms["pg_loss"], micro["rollout_is_weights"], mask, self.is_weights_per
            )
        corrections = {}
        if "rollout_log_probs" in micro:  # verl's actor: the evolving policy against the rollout's
            with torch.no_grad():
                corrections = prefixed(offpolicy_metrics(logp.detach(), micro["rollout_log_probs"], mask))
        return terms, mask, corrections

    def _dp_mean(self, total: torch.Tensor, count: torch.Tensor) -> float:
        """A sum and a count over every data-parallel rank's micro-batch (rollout_is_batch_normalize)."""
        summed = self.engine.dp_all_reduce_sum(torch.stack([total.detach(), count.detach()]))
        return float(summed[0] / summed[1].clamp(min=1e-8))

    def _mean_shares(self, metrics: dict[str, float], micro, device) -> dict[str, torch.Tensor]:
        """Per-micro-batch metrics as shares whose sum over a mini-batch's micro-batches and ranks is
        their mean over them (verl averages its micro-batches' values)."""
        if not metrics:
            return {}
        parts = micro.num_in_mini_batch * self.engine.dp_size
        return {k: torch.tensor(v / parts, dtype=torch.float64, device=device) for k, v in metrics.items()}

    def update(
        self, tensors: dict[str, torch.Tensor], mini_size: int, micro_size: int | None
    ) -> dict[str, float]:
        """ppo_epochs passes over this rank's rows, one optimizer step per mini-batch, against the
        given `old_log_probs`.

        `mini_size` is this rank's share of a mini-batch (ppo_mini_batch_size * n / dp_size); the
        driver orders rows so that local mini-batch j of every rank together form global mini-batch j.
        """
        return self._update(tensors, mini_size, micro_size, None)

    def update_own_first(
        self, tensors: dict[str, torch.Tensor], mini_size: int, micro_size: int | None
    ) -> tuple[dict[str, float], torch.Tensor]:
        """As `update`, but the first mini-batch's rows (this rank's first `mini_size`) need no
        `old_log_probs`: they are the update's own forward's in epoch 0 (before any step). The other
        rows' come in `old_log_probs` (only those rows are read). Returns the metrics and the
        old log-probs of all rows, (bs, R) on the host (0 beyond a micro-batch's kept columns, as
        compute_log_prob's)."""
        num_rows, width = tensors["response_mask"].shape
        if num_rows > mini_size and "old_log_probs" not in tensors:
            raise ValueError(
                "rows after the first mini-batch need old_log_probs from a pass before the update"
            )
        given = tensors.get("old_log_probs")
        old = torch.zeros((num_rows, width)) if given is None else given.detach().float().cpu().clone()
        old[:mini_size] = 0.0
        kept: dict = {}
        metrics = self._update({**tensors, "old_log_probs": old}, mini_size, micro_size, kept)
        for rows, logp in kept.items():
            old[list(rows), : logp.shape[1]] = logp.float().cpu()
        return metrics, old

    def _update(self, tensors, mini_size: int, micro_size: int | None, kept: dict | None) -> dict[str, float]:
        cfg = self.cfg
        keys = [*MODEL_INPUTS, "response_mask", "advantages", "old_log_probs"]
        if cfg.use_kl_loss:
            keys.append("ref_log_prob")
        keys += [k for k in ("rollout_is_weights", "rollout_log_probs") if k in tensors]
        loss = (
            self.loss
            if kept is None
            else (lambda output, micro, scale: self.loss(output, micro, scale, kept))
        )
        metrics = self.engine.update(
            {k: tensors[k] for k in keys},
            loss,
            mini_size=mini_size,
            micro_size=micro_size,
            max_token_len=cfg.ppo_max_token_len_per_gpu if cfg.use_dynamic_bsz else None,
            epochs=cfg.ppo_epochs,
            response_length=norm_length(cfg, self.response_length),
            request=self.request,
            local_updates=self.local_updates,
        )
        out = {k if k.startswith(PREFIX) else f"actor/{k}": v for k, v in metrics.items()}
        if cfg.use_kl_loss:
            out["actor/kl_coef"] = cfg.kl_loss_coef
        return out

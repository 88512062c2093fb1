"""What every rollout backend shares: the interface, sampling settings, the generated batch's layout.

`Rollout` is the interface the worker drives (one subclass per backend, registered by name in
rollout/__init__.py): `update_weights(named_tensors)` (the hybrid engine's weight sync: the actor's
full weights, one tensor at a time), `update_adapter(tensors, config)` (LoRA: the adapter only,
rollout/weight_sync.py), `weights_loaded` (False while the backend holds no valid
weights: before the first sync, or after a sleep that discarded them; the worker syncs then) and
`release()` (give back the device memory held between rollouts; a generate does not do it itself,
so several generates may share one wake-up) and
`generate_tokens(prompt_ids, prompt_mask, params)` returning raw response tokens (prompts * n,
<= response_length), each prompt's n samples adjacent, with their sampled-token log-probs (same
shape) or None where the backend has none. Multi-turn rollouts (agent_loop/) drive it token-in /
token-out instead: `generate_requests(requests, call)` generates the requests waiting (of many
trajectories, agent_loop/scheduler.py) in one engine call, each request its own prompt ids, token
budget and seed (from its key, never from its batch-mates), and returns the sampled ids and their
log-probs as lists (the worker releases after the rollout's last call, as after a generate); the
ranks that share one engine (`engine_group_size`, a vLLM TP group) call it together and agree when
through `gather_group`.
Its sampling state (`state_dict()` / `load_state_dict()`: the call counters its seeds derive from,
small ints) goes into every checkpoint, so a resumed run draws the same samples as an uninterrupted
one; validation (`SamplingParams.validate`) counts its calls apart, so validating does not move
training's stream.
`assemble` turns those into verl's batch layout:
  prompts (bs, P) left-padded | responses (bs, R) right-padded with pad after the first EOS
  input_ids = [prompts | responses], attention_mask, position_ids continuing the prompt's,
  response_mask (bs, R): 1 up to and including the first EOS.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    do_sample: bool = True
    response_length: int = 16
    ignore_eos: bool = False
    validate: bool = False  # a validation rollout: its own random stream

    @property
    def greedy(self) -> bool:
        return not self.do_sample or self.temperature == 0


def sampling_params(rollout_cfg, validate: bool) -> SamplingParams:
    """The rollout section's sampling (val_kwargs' for validation) as the backends take it."""
    source = rollout_cfg.val_kwargs if validate else rollout_cfg
    return SamplingParams(
        n=source.n,
        temperature=source.temperature,
        top_k=source.top_k,
        top_p=source.top_p,
        do_sample=source.do_sample,
        response_length=rollout_cfg.response_length,
        ignore_eos=rollout_cfg.ignore_eos,
        validate=validate,
    )


@dataclass(frozen=True)
class TokenRequest:
    """One generation of a multi-turn rollout (n = 1): its prompt ids, at most `max_tokens` new ones."""

    prompt_ids: tuple[int, ...]
    max_tokens: int
    params: SamplingParams  # temperature, top-k, top-p, greedy; its n and response_length are not read
    key: tuple[int, ...]  # (trajectory, request) within the call; its seed derives from it


@dataclass
class TokenResult:
    token_ids: list[int]  # as sampled, up to and including EOS (unless ignore_eos)
    log_probs: list[float]  # of each sampled token, under the distribution it was drawn from
    stop_reason: str  # eos | length
    # times the engine's scheduler preempted the request (verl's TokenOutput.num_preempted); None:
    # the engine does not say, which verl's metrics report as -1
    num_preempted: int | None = None


class Rollout(ABC):
    """A rollout backend as the worker sees it. Subclasses take (model_cfg, rollout_cfg, tokenizer,
    rank) and call `super().__init__(seed, rank)`."""

    weights_loaded: bool = True
    # the tokens a response ends at: the tokenizer's EOS, then the other `eos_token_id`s of the model
    # folder's generation_config.json (Qwen2.5's instruct models list <|endoftext|> beside <|im_end|>),
    # which vLLM stops at too; the response mask ends at the first of them (assemble)
    stop_ids: list[int]

    def __init__(self, seed: int, rank: int):
        self.seed, self.rank = seed, rank
        self.num_calls, self.num_val_calls = 0, 0

    @abstractmethod
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> dict[str, float]:
        """Load the actor's full weights (every rank iterates together); returns at least
        update_weights_s and update_weights_gb."""

    @abstractmethod
    def update_adapter(self, tensors: dict[str, torch.Tensor], config: dict) -> dict[str, float]:
        """LoRA: replace the served adapter by the actor's (full tensors in PEFT's file format, with
        adapter_config.json's fields); the base weights stay. Returns what update_weights does."""

    @abstractmethod
    def generate_tokens(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(responses (B*n, <=R), their sampled-token log-probs or None) for left-padded prompts (B, P)."""

    @abstractmethod
    def generate_requests(
        self, requests: list[TokenRequest], call: tuple[int, ...]
    ) -> tuple[list[TokenResult], bool]:
        """Every request in one engine call (`call`: the rollout call's key, next_call), each sampled
        under its own seed (rollout.seed, rank, call, request key). Returns the results in request
        order and whether any rank sharing this rank's engine (its TP group) had a request: those
        ranks call together, one with none passes []."""

    def landed_fingerprints(self, base: bool, adapter: bool) -> dict:
        """{the engine's parameter name: rollout/weight_check.Landed} of the weights the engine holds
        now -- the base (all of them without LoRA) and/or the LoRA adapter -- read where they
        landed, for the check after every sync. A backend that cannot say returns {} (the check
        then counts every parameter as unverified and says so)."""
        return {}

    engine_group_size: int = 1  # ranks that call one engine together (a vLLM TP group)

    def gather_group(self, obj) -> list:
        """Every member's `obj` (picklable), in rank order: a collective of the ranks sharing this
        engine, by which their multi-turn schedulers agree when to call it; [obj] alone."""
        return [obj]

    def release(self) -> None:
        """Give back the device memory the engine holds between rollouts (vLLM: sleep); nothing for a
        backend that keeps none. The worker calls it after a rollout and before its other phases."""
        return None  # the HF rollout keeps its copy of the weights on the device throughout

    def needs_sync(self, actor_changed: bool) -> bool:
        """Whether the worker must sync weights before the next generate: the actor moved since the
        last sync, or the backend holds no valid weights (never loaded, or discarded by a sleep)."""
        return actor_changed or not self.weights_loaded

    def next_call(self, validate: bool) -> tuple[int, ...]:
        """Count a generate call: (training call,) or (validation call, 1), the key seeds derive from."""
        if validate:
            self.num_val_calls += 1
            return (self.num_val_calls, 1)
        self.num_calls += 1
        return (self.num_calls,)

    def state_dict(self) -> dict[str, int]:
        """The sampling state a checkpoint keeps."""
        return {"num_calls": self.num_calls, "num_val_calls": self.num_val_calls}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.num_calls, self.num_val_calls = int(state["num_calls"]), int(state["num_val_calls"])


def stop_ids(eos_id: int | None, generation_config) -> list[int]:
    """The tokenizer's EOS, then the other `eos_token_id`s of the model's generation config."""
    listed = getattr(generation_config, "eos_token_id", None)
    listed = [listed] if isinstance(listed, int) else list(listed or [])
    return list(dict.fromkeys([i for i in [eos_id, *listed] if i is not None]))


def folder_stop_ids(eos_id: int | None, folder: str) -> list[int]:
    """stop_ids of a model folder: its generation_config.json's eos_token_id list is what vLLM stops
    at (no such file: the tokenizer's EOS alone). The rollouts and the format checks read it here."""
    from transformers import GenerationConfig

    try:
        config = GenerationConfig.from_pretrained(folder)
    except OSError:
        config = None
    return stop_ids(eos_id, config)


def response_mask_from_tokens(responses: torch.Tensor, eos_id: int | list[int]) -> torch.Tensor:
    """1 for tokens up to and including the first stop token (`eos_id`: one id or the rollout's
    `stop_ids`), 0 after it."""
    is_eos = torch.isin(responses, torch.tensor(eos_id, dtype=responses.dtype).reshape(-1)).long()
    seen_before = is_eos.cumsum(-1) - is_eos  # EOS strictly before this position
    return (seen_before == 0).long()


def assemble(
    prompt_ids: torch.Tensor,  # (B, P) left-padded
    prompt_mask: torch.Tensor,  # (B, P)
    prompt_pos: torch.Tensor,  # (B, P)
    raw_responses: torch.Tensor,  # (B * n, <=R)
    n: int,
    response_length: int,
    eos_id: int | list[int],  # the rollout's stop_ids: every token the engine ends a response at
    pad_id: int,
    stop_at_eos: bool = True,
) -> dict[str, torch.Tensor]:
    bs = raw_responses.shape[0]
    responses = torch.full((bs, response_length), pad_id, dtype=torch.long)
    width = min(raw_responses.shape[1], response_length)
    responses[:, :width] = raw_responses[:, :width]
    if stop_at_eos:
        mask = response_mask_from_tokens(responses, eos_id)
        mask[:, width:] = 0
    else:
        mask = torch.zeros_like(responses)
        mask[:, :width] = 1
    responses = torch.where(mask.bool(), responses, torch.full_like(responses, pad_id))
    prompts = prompt_ids.repeat_interleave(n, dim=0)
    p_mask = prompt_mask.repeat_interleave(n, dim=0)
    p_pos = prompt_pos.repeat_interleave(n, dim=0)
    r_pos = p_pos[:, -1:] + torch.arange(1, response_length + 1).unsqueeze(0)
    return {
        "prompts": prompts,
        "responses": responses,
        "response_mask": mask,
        "input_ids": torch.cat([prompts, responses], dim=-1),
        "attention_mask": torch.cat([p_mask, mask], dim=-1),
        "position_ids": torch.cat([p_pos, r_pos], dim=-1),
    }


def place_log_probs(raw_log_probs: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """The rollout's sampled-token log-probs in the (bs, R) response layout, 0 outside the mask."""
    out = torch.zeros(response_mask.shape, dtype=torch.float32)
    width = min(raw_log_probs.shape[1], out.shape[1])
    out[:, :width] = raw_log_probs[:, :width].float()
    return out * response_mask


def compute_logprob_diff_metrics(
    rollout_log_probs: torch.Tensor, actor_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """|rollout - actor| log-prob of the sampled tokens, over response tokens: the proof that the
    rollout ran the policy the actor holds (fp32 on CPU: about 1e-5 or better; a stale rollout: >1e-2)."""
    mask = response_mask.bool()
    if not mask.any():
        return {}
    diff = (rollout_log_probs - actor_log_probs).abs()[mask]
    return {
        "rollout/actor_logprob_abs_diff_max": diff.max().item(),
        "rollout/actor_logprob_abs_diff_mean": diff.mean().item(),
    }


def generate_round(
    rollout: Rollout, requests: list[tuple[list[int], int, int]], params: SamplingParams
) -> list:
    """One round of the V1 async trainers' partial rollouts on one rank: each request (prompt ids +
    the tokens its trajectory has so far, the tokens to generate at most, its key) in one engine
    call; (token ids, their log-probs, stop reason) each."""
    mine = [TokenRequest(tuple(ids), budget, params, (key,)) for ids, budget, key in requests]
    results, _ = rollout.generate_requests(mine, rollout.next_call(False))
    return [(r.token_ids, r.log_probs, r.stop_reason) for r in results]


def generate_single_turn(rollout: Rollout, batch: dict, params: SamplingParams, pad_id: int) -> dict:
    """Left-padded prompts (`batch`: input_ids, attention_mask, position_ids) through the engine,
    n responses each, assembled in verl's layout (with the rollout's log-probs when it gives them)."""
    raw, raw_log_probs = rollout.generate_tokens(batch["input_ids"], batch["attention_mask"], params)
    out = assemble(
        batch["input_ids"],
        batch["attention_mask"],
        batch["position_ids"],
        raw,
        params.n,
        params.response_length,
        eos_id=rollout.stop_ids,  # every token the engine ends a response at
        pad_id=pad_id,
        stop_at_eos=not params.ignore_eos,
    )
    if raw_log_probs is not None:
        out["rollout_log_probs"] = place_log_probs(raw_log_probs, out["response_mask"])
    return out

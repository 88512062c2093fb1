"""The reference rollout backend: transformers' `generate` on an unsharded copy of the policy.

Each rank keeps a full copy of the weights for generation, refreshed from the FSDP2 actor before
every rollout (`update_weights`). Generating on the copy needs no collectives, so ranks may finish
at different lengths; the price is one extra copy of the weights per rank (vLLM, once available,
is the memory-frugal backend). Sampling draws from a generator seeded by (seed, rank, call), forked
from the training RNG, so rollouts are reproducible and never perturb training's random state.
Training and validation calls are counted apart (validation seeds carry a 1), and the counts are
the backend's checkpointed state.

Sampling is exactly what the rollout config says, as in verl: temperature, then top_k (<= 0: off),
then top_p (1.0: off), and nothing else. `generate` would otherwise fill every unset field from the
model folder's generation_config.json and then from transformers' global defaults (top_k=50: with
top_k=None the prepared config carries a TopK warper, and a real model's file adds its own top_k,
top_p, temperature and repetition penalty), so the actor's untruncated log-probs would be of
another distribution than the one sampled from. The model's generation config is therefore replaced
by an empty one, generate's own warpers are switched off with explicit neutral values, and the
warpers are passed in as processors (`build_logits_processors`). The last processor records the
log-prob of each sampled token under the distribution it was drawn from (vLLM's
"processed_logprobs"), keeping one step's (batch, vocab) log-probs at a time and every step's
(batch, 1) results on the device until the rollout ends (one copy to the host, not one per token), so the
rollout-vs-actor log-prob metric covers this backend too and any hidden truncation shows.

A multi-turn request ends at the tokenizer's EOS or at any other `eos_token_id` the folder's
generation_config.json lists, as vLLM ends it (gpt-oss's folder lists <|call|>, the end of a
tool-calling turn, beside its EOS <|return|>): read before the config is replaced. (A single-turn
sample still ends at the tokenizer's EOS only, its response mask being cut there.)

Multi-turn requests (`generate_requests`) are sampled per request instead: the requests waiting
share one generate call (left-padded), but each row draws from a generator of its own, seeded by
(seed, rank, call, request key) (`PerRequestSampler`), so a request samples the same tokens whatever
else is in its call (up to the float rounding that a different padding width gives: measured in
docs/multi_turn.md).

With LoRA the copy is wrapped by PEFT like the actor: its base comes from model.path once, and each
sync replaces only the adapter (`update_adapter`).
"""

from __future__ import annotations

import dataclasses
import math
import time

import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import (
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from verl_lite.engine.attention import requested_attention, select_attention
from verl_lite.engine.lora import apply_lora
from verl_lite.engine.lora_spec import served_adapter
from verl_lite.engine.parallelize import parse_dtype
from verl_lite.rollout.base import (
    Rollout,
    SamplingParams,
    TokenRequest,
    TokenResult,
    response_mask_from_tokens,
    stop_ids,
)
from verl_lite.utils import device as dev
from verl_lite.utils.hf_model import load_causal_lm


class SampledTokenLogProbs(LogitsProcessor):
    """Last processor of a generate call: the log-prob of every sampled token under the processed
    (warped) distribution it was sampled from, (batch, steps). A processor sees step t's scores before
    the token is drawn, and that token only as the last input id of step t + 1, so one step's
    log-probs are kept until then; `finish` reads the last step's token from the output."""

    def __init__(self):
        self.pending: torch.Tensor | None = None  # (batch, vocab) log-probs of the latest step
        self.steps: list[torch.Tensor] = []  # (batch, 1) per generated token, on the model's device

    def _take(self, tokens: torch.Tensor) -> None:
        # stays on the device: a copy to the host per token would stall every decode step
        if self.pending is not None:
            self.steps.append(self.pending.gather(-1, tokens.unsqueeze(-1)))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self._take(input_ids[:, -1])
        self.pending = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        self._take(last_tokens)
        self.pending = None
        if not self.steps:
            return torch.zeros(last_tokens.shape[0], 0)
        return dev.to_host(torch.cat(self.steps, dim=-1))  # one copy for the whole rollout


class PerRequestSampler(LogitsProcessor):
    """Last processor of a generate call run greedily: row i's token drawn from softmax(scores[i])
    with its own generator (seeded by `seeds[i]`), as vLLM samples (probs / Exponential(1), argmax);
    the scores come back -inf but at the drawn token, which generate's argmax then takes. A row's
    draws depend on its own scores and seed only, not on its batch-mates'."""

    def __init__(self, seeds: list[int]):
        self.seeds, self.generators = seeds, None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.generators is None:
            self.generators = [torch.Generator(scores.device).manual_seed(s) for s in self.seeds]
        probs = torch.softmax(scores.float(), dim=-1)
        noise = torch.empty_like(probs)
        for row, generator in enumerate(self.generators):
            noise[row].exponential_(generator=generator)
        tokens = (probs / noise).argmax(dim=-1, keepdim=True)
        return torch.full_like(scores, -math.inf).scatter_(-1, tokens, 0.0)


def build_logits_processors(params: SamplingParams) -> LogitsProcessorList:
    """The sampling warpers of `params`, in vLLM's order (temperature, top-k, top-p); none for greedy."""
    if params.greedy:
        return LogitsProcessorList()
    warpers = LogitsProcessorList()
    if params.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(params.temperature))
    if params.top_k > 0:
        warpers.append(TopKLogitsWarper(top_k=params.top_k))
    if params.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=params.top_p))
    return warpers


def build_generation_config(
    params: SamplingParams, eos_id: int | list[int] | None, pad_id: int
) -> GenerationConfig:
    """Length and stop settings only; sampling fields at values for which generate adds no warper
    (the warpers come from `build_logits_processors`)."""
    sampling = {} if params.greedy else {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
    return GenerationConfig(
        max_new_tokens=params.response_length,
        do_sample=not params.greedy,
        eos_token_id=None if params.ignore_eos else eos_id,
        pad_token_id=pad_id,
        **sampling,
    )


class HFRollout(Rollout):
    def __init__(self, model_cfg, rollout_cfg, tokenizer, rank: int):
        super().__init__(rollout_cfg.seed, rank)
        dtype = parse_dtype(rollout_cfg.dtype, "actor_rollout_ref.rollout.dtype")
        attention = select_attention(  # the actor's kernel, or sdpa where generate cannot use it
            requested_attention(model_cfg.override_config), accelerator=dev.has_accelerator(), generation=True
        )
        model = load_causal_lm(model_cfg, dtype, attn_implementation=attention.implementation)
        self.stop_ids = stop_ids(tokenizer.eos_token_id, model.generation_config)
        # generate() fills every field left unset from the model's generation_config.json (sampling
        # defaults, an EOS that would stop ignore_eos runs): an empty one leaves the rollout config in
        # charge; EOS is passed per call. Set on the HF model itself, which PEFT's generate defers to.
        model.generation_config = GenerationConfig()
        lora = served_adapter(model_cfg)  # lora.merge: a plain copy, synced with merged weights
        if lora is not None:
            model = apply_lora(model, lora)
        self.model = model.to(dev.local_device()).eval()
        self.params = dict(self.model.named_parameters())
        self.eos_id, self.pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
        self.weights_loaded = True  # loaded from the same folder as the actor
        self.lora_names: dict[str, str] | None = (
            None  # {adapter parameter: its sent name}, at the first check
        )

    def _call_seed(self, validate: bool) -> int:
        key = (self.seed, self.rank, *self.next_call(validate))
        return hash(key) % (2**63)  # ints only: tuple hashes of ints do not vary between processes

    def request_seed(self, call: tuple[int, ...], key: tuple[int, ...]) -> int:
        """A multi-turn request's seed: (seed, rank, call, request key), whatever its batch."""
        return hash((self.seed, self.rank, *call, *key)) % (2**63)  # ints only: stable across processes

    @torch.no_grad()
    def update_weights(self, named_tensors) -> dict[str, float]:
        start, num_bytes = time.perf_counter(), 0
        for name, tensor in named_tensors:
            if name not in self.params:
                raise KeyError(f"weight sync: the rollout model has no parameter {name!r}")
            self.params[name].copy_(tensor)
            num_bytes += tensor.numel() * tensor.element_size()
        return {"update_weights_s": time.perf_counter() - start, "update_weights_gb": num_bytes / 1024**3}

    @torch.no_grad()
    def update_adapter(self, tensors: dict[str, torch.Tensor], config: dict) -> dict[str, float]:
        """LoRA: copy the actor's adapter (full tensors in PEFT's file format) into the copy's adapter."""
        from peft import set_peft_model_state_dict

        start = time.perf_counter()
        result = set_peft_model_state_dict(self.model, tensors)
        unset = [k for k in result.missing_keys if ".lora_" in k]
        if result.unexpected_keys or unset:
            raise KeyError(f"adapter sync: unexpected {result.unexpected_keys}, not set {unset}")
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        return {"update_weights_s": time.perf_counter() - start, "update_weights_gb": nbytes / 1024**3}

    def landed_fingerprints(self, base: bool, adapter: bool) -> dict:
        """The copy's parameters as it holds them (rollout/weight_check.py): the base (every
        parameter without LoRA) and/or the adapter, each under the name a sync sends it by."""
        from verl_lite.engine.lora import adapter_file_names, base_param_name
        from verl_lite.engine.weight_fingerprint import fingerprint
        from verl_lite.rollout.weight_check import Landed

        lora = self.lora_names
        if lora is None:
            lora = self.lora_names = (
                adapter_file_names(self.model, [n for n in self.params if ".lora_" in n])
                if hasattr(self.model, "peft_config")
                else {}
            )
        out = {}
        for name, param in self.params.items():
            if name in lora:
                sent = lora[name] if adapter else None
            else:
                sent = (base_param_name(name) if lora else name) if base else None
            if sent is not None:
                out[name] = Landed(fingerprint(param), param.dtype, (sent,))
        return out

    def _generate(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        params: SamplingParams,
        seed: int | list[int],
        eos: int | list[int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """model.generate on left-padded prompts under `seed` (the global RNG restored after), or
        with a list, one seed per row (PerRequestSampler): the new tokens (rows, <=R) on the host and
        their sampled-token log-probs."""
        recorder = SampledTokenLogProbs()
        processors = build_logits_processors(params)
        processors.append(recorder)
        eos = self.stop_ids if eos is None else eos
        config = build_generation_config(params, eos, self.pad_id)
        if isinstance(seed, list):
            if not params.greedy:  # generate's argmax takes each row's own draw
                processors.append(PerRequestSampler(seed))
                config = build_generation_config(
                    dataclasses.replace(params, do_sample=False), eos, self.pad_id
                )
            seed = 0  # the global RNG is not drawn from
        device = dev.local_device()
        with dev.fork_rng():
            dev.seed_rng(seed)
            out = self.model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                generation_config=config,
                logits_processor=processors,
            )
        return out[:, ids.shape[1] :].cpu(), recorder.finish(out[:, -1])

    @torch.no_grad()
    def generate_tokens(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(responses (B*n, <=R), their sampled-token log-probs (B*n, <=R), 0 after the first EOS)."""
        # each prompt n times, adjacent (HF refuses num_return_sequences > 1 for greedy decoding)
        prompt_ids, prompt_mask = (
            prompt_ids.repeat_interleave(params.n, 0),
            prompt_mask.repeat_interleave(params.n, 0),
        )
        tokens, log_probs = self._generate(prompt_ids, prompt_mask, params, self._call_seed(params.validate))
        if not params.ignore_eos:  # finished rows continue with pad tokens, whose log-probs mean nothing
            log_probs = torch.where(response_mask_from_tokens(tokens, self.stop_ids).bool(), log_probs, 0.0)
        return tokens, log_probs

    @torch.no_grad()
    def generate_requests(
        self, requests: list[TokenRequest], call: tuple[int, ...]
    ) -> tuple[list[TokenResult], bool]:
        """Multi-turn requests (base.Rollout): left-padded into one generate call per sampling
        setting (one in practice), each sampled under its own seed and cut to its own budget and
        first EOS."""
        results: list[TokenResult | None] = [None] * len(requests)
        groups: dict[SamplingParams, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(dataclasses.replace(r.params, n=1, response_length=1), []).append(i)
        for params, rows in groups.items():
            for i, result in zip(rows, self._generate_group([requests[i] for i in rows], params, call)):
                results[i] = result
        return results, bool(requests)

    def _generate_group(
        self, requests: list[TokenRequest], params: SamplingParams, call
    ) -> list[TokenResult]:
        width = max(len(r.prompt_ids) for r in requests)
        ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(requests), width), dtype=torch.long)
        for row, r in enumerate(requests):
            ids[row, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
            mask[row, width - len(r.prompt_ids) :] = 1
        params = dataclasses.replace(params, response_length=max(r.max_tokens for r in requests))
        seeds = [self.request_seed(call, r.key) for r in requests]
        tokens, log_probs = self._generate(ids, mask, params, seeds, self.stop_ids)
        tokens, log_probs = tokens.tolist(), log_probs.tolist()
        results = []
        for r, toks, logps in zip(requests, tokens, log_probs):
            toks, stop = toks[: r.max_tokens], "length"
            end = next((i for i, t in enumerate(toks) if t in self.stop_ids), None)
            if not params.ignore_eos and end is not None:
                toks, stop = toks[: end + 1], "eos"
            # one generate call runs every request to its end: nothing is ever preempted
            results.append(TokenResult(toks, logps[: len(toks)], stop, num_preempted=0))
        return results

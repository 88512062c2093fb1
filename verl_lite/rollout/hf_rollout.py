"""The reference rollout backend: transformers' `generate` on an unsharded copy of the policy.

Each rank keeps a full copy of the weights for generation, refreshed from the FSDP2 actor before
every rollout (`update_weights`). Generating on the copy needs no collectives, so ranks may finish
at different lengths; the price is one extra copy of the weights per rank (vLLM, once available,
is the memory-frugal backend). Sampling draws from a generator seeded by (seed, rank, call), forked
from the training RNG, so rollouts are reproducible and never perturb training's random state.
Training and validation calls are counted apart (validation seeds carry a 1), and the counts are
the backend's checkpointed state.

With LoRA the copy is wrapped by PEFT like the actor: its base comes from model.path once, and each
sync replaces only the adapter (`update_adapter`).
"""

from __future__ import annotations

import time

import torch
from transformers import GenerationConfig

from verl_lite.engine.lora import LoraSpec, apply_lora
from verl_lite.engine.parallelize import parse_dtype
from verl_lite.rollout.base import SamplingParams
from verl_lite.utils import device as dev
from verl_lite.utils.hf_model import load_causal_lm


class HFRollout:
    def __init__(self, model_cfg, rollout_cfg, tokenizer, rank: int):
        dtype = parse_dtype(rollout_cfg.dtype, "actor_rollout_ref.rollout.dtype")
        model = load_causal_lm(model_cfg, dtype)
        lora = LoraSpec.of(model_cfg)
        if lora is not None:
            model = apply_lora(model, lora)
        self.model = model.to(dev.local_device()).eval()
        self.params = dict(self.model.named_parameters())
        # generate() fills unset fields from the model's own defaults, so an EOS left unset there would
        # come back from generation_config.json and stop ignore_eos runs; EOS is passed per call instead
        self.model.generation_config.eos_token_id = None
        self.eos_id, self.pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
        self.seed, self.rank = rollout_cfg.seed, rank
        self.num_calls, self.num_val_calls = 0, 0
        self.weights_loaded = True  # loaded from the same folder as the actor

    def state_dict(self) -> dict[str, int]:
        return {"num_calls": self.num_calls, "num_val_calls": self.num_val_calls}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.num_calls, self.num_val_calls = int(state["num_calls"]), int(state["num_val_calls"])

    def _call_seed(self, validate: bool) -> int:
        if validate:
            self.num_val_calls += 1
            key = (self.seed, self.rank, self.num_val_calls, 1)
        else:
            self.num_calls += 1
            key = (self.seed, self.rank, self.num_calls)
        return hash(key) % (2**63)  # ints only: tuple hashes of ints do not vary between processes

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

    @torch.no_grad()
    def generate_tokens(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams
    ) -> tuple[torch.Tensor, None]:
        """(responses (B*n, <=R), None): HF generate does not return sampled-token log-probs here."""
        seed = self._call_seed(params.validate)
        config = GenerationConfig(
            max_new_tokens=params.response_length,
            do_sample=not params.greedy,
            temperature=None if params.greedy else params.temperature,
            top_k=None if params.greedy or params.top_k <= 0 else params.top_k,
            top_p=None if params.greedy else params.top_p,
            eos_token_id=None if params.ignore_eos else self.eos_id,
            pad_token_id=self.pad_id,
        )
        device = dev.local_device()
        # each prompt n times, adjacent (HF refuses num_return_sequences > 1 for greedy decoding)
        prompt_ids, prompt_mask = (
            prompt_ids.repeat_interleave(params.n, 0),
            prompt_mask.repeat_interleave(params.n, 0),
        )
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            out = self.model.generate(
                input_ids=prompt_ids.to(device),
                attention_mask=prompt_mask.to(device),
                generation_config=config,
            )
        return out[:, prompt_ids.shape[1] :].cpu(), None

"""Which attention kernel a model runs: `<model>.override_config.attn_implementation`, with verl's meaning.

verl hands `override_config.attn_implementation` to transformers' `from_pretrained` for the actor,
the reference, the critic and the reward model, and defaults it to `flash_attention_2`. Here the
request is resolved against the machine once, when a model is built (`select_attention`):

  GPU, flash_attention_2/3 with its package installed (flash_attn / flash_attn_interface): as asked.
      Packed rows (use_remove_padding) then run the variable-length kernel: transformers reads the
      sequence boundaries from the packed position_ids, no mask is built.
  GPU, flash requested but not installed: flex_attention. transformers turns the same boundaries into
      a block mask (masking_utils: causal AND same-sequence), and flex attention skips the blocks it
      rules out: neither the (S, S) mask nor the compute of the masked blocks. (The GPU machine's
      image has no flash_attn.)
  CPU: flash kernels do not exist there, so a flash request runs today's exact path, sdpa with the
      block-causal (S, S) mask; sdpa and eager run as asked, flex_attention too where the model only
      runs forwards (the reference, a reward model: torch has no flex backward on CPU).
  Sequence parallelism (ulysses.py wraps sdpa or eager) and HF generate (the HF rollout: a block mask
      per decode length would be rebuilt at every step) keep sdpa where the request is a kernel they
      cannot use.

The memory model reads the same choice: only sdpa and eager materialise the (rows, S, S) mask
(planner/activations.mask_terms). Packed and padded rows give the same log-probs under every kernel
(tests/engine/test_attention.py: 1e-5 in fp32 on CPU, sdpa and flex; tests/engine/test_attention_gpu.py
on a GPU, bf16).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

KEY = "override_config.attn_implementation"
VERL_DEFAULT = "flash_attention_2"  # verl's fsdp_workers: override_config.get("attn_implementation", ...)
FLASH_PACKAGES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}
DENSE_MASK = ("sdpa", "eager")  # the kernels that take a materialised (rows, 1, S, S) mask
IMPLEMENTATIONS = (*DENSE_MASK, "flex_attention", *FLASH_PACKAGES)
SP_BASES = DENSE_MASK  # what engine/ulysses.py wraps


@dataclass(frozen=True)
class AttentionChoice:
    requested: str  # as configured, or verl's default
    implementation: str  # what the model runs here
    why: str = ""  # why it differs from the request ('' when it does not)

    @property
    def dense_mask(self) -> bool:
        """Whether packed rows build the (rows, 1, S, S) block-causal mask (the memory model's term)."""
        return self.implementation in DENSE_MASK


def package_installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def requested_attention(override_config: dict | None) -> str:
    """The configured implementation, or verl's default when the key is not set."""
    return (override_config or {}).get("attn_implementation") or VERL_DEFAULT


def attention_problem(override_config: dict | None, model_key: str) -> str | None:
    """One line when `<model_key>.override_config.attn_implementation` is not an implementation."""
    value = requested_attention(override_config)
    if value in IMPLEMENTATIONS:
        return None
    return (
        f"{model_key}.{KEY}={value!r} is not an attention implementation verl_lite runs; use one of "
        f"{list(IMPLEMENTATIONS)} (transformers' names; verl's default is {VERL_DEFAULT})"
    )


def select_attention(
    requested: str | None,
    *,
    accelerator: bool,
    installed: Callable[[str], bool] = package_installed,
    sp_size: int = 1,
    generation: bool = False,
    trains: bool = True,
) -> AttentionChoice:
    """The implementation a model runs for `requested` (None: verl's default) on this machine;
    `trains`: the model runs backward passes too."""
    want = requested or VERL_DEFAULT
    if want not in IMPLEMENTATIONS:
        raise ValueError(f"{KEY}={want!r}: use one of {list(IMPLEMENTATIONS)}")
    if want in FLASH_PACKAGES and not accelerator:
        return AttentionChoice(want, "sdpa", "flash kernels need a GPU: sdpa with the block-causal mask")
    if want == "flex_attention" and not accelerator and trains:
        return AttentionChoice(want, "sdpa", "torch has no flex attention backward on CPU: sdpa")
    got, why = want, ""
    if want in FLASH_PACKAGES and not installed(FLASH_PACKAGES[want]):
        got, why = "flex_attention", f"{FLASH_PACKAGES[want]} is not installed: flex attention's block mask"
    if got not in SP_BASES and sp_size > 1:
        return AttentionChoice(want, "sdpa", f"sequence parallelism wraps {list(SP_BASES)}: sdpa")
    if got == "flex_attention" and generation:
        return AttentionChoice(want, "sdpa", "generate rebuilds a block mask at every step: sdpa")
    return AttentionChoice(want, got, why)

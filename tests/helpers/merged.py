"""What the model merger writes: every floating tensor in bfloat16 (verl 0.9's fsdp merger), each the
bf16 rounding of the weight it came from."""

from __future__ import annotations

import os

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def assert_bf16_of(merged_dir: str, source) -> None:
    """`source`: a HF folder saved in fp32 (or a model). Within one bf16 rounding step: a merge done
    in another order than the source's (PEFT's merge for LoRA) may round the other way."""
    merged = load_file(os.path.join(merged_dir, "model.safetensors"))
    model = (
        AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
        if isinstance(source, str)
        else source
    )
    want = model.state_dict()
    assert merged and all(t.dtype == torch.bfloat16 for t in merged.values()), "the merger writes bf16"
    for name, tensor in merged.items():
        ref = want[name].float()
        step = ref.abs() * 2**-7 + 1e-30  # one bf16 ulp
        assert ((tensor.float() - ref).abs() <= step).all(), f"{name} is not the bf16 rounding of the weight"

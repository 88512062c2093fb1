"""What only a GPU shows for packed attention (engine/attention.py): the kernel chosen for verl's default
(flash_attention_2 where flash_attn is installed, else flex attention's block mask) gives the padded
sdpa path's log-probs at bf16 tolerance, without the (rows, S, S) mask sdpa builds. Run by
scripts/gpu_check.sh; the choice itself and the CPU kernels are tested in tests/engine/test_attention.py.

One process, world size 1, a randomly initialised Qwen2.5-0.5B shape in bf16 (the reference engine:
no optimizer), 8 ragged rows of up to 2048 tokens.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from transformers import AutoConfig, AutoModelForCausalLM

from tests.helpers.configs import fp32_fsdp, tiny_model
from tests.helpers.dist import free_port
from tests.helpers.model_configs import HALF_B
from verl_lite.config.schema import MixedPrecisionConfig
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.utils import device as dev
from verl_lite.workers.actor import compute_log_prob

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (scripts/gpu_check.sh)"),
]
ROWS, PROMPT, RESPONSE = 8, 1024, 1024
BF16 = MixedPrecisionConfig(param_dtype="bf16", reduce_dtype="fp32", buffer_dtype="fp32")


@pytest.fixture(scope="module", autouse=True)
def group():
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dev.set_local_device()
    dist.init_process_group(dev.dist_backend(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _batch(vocab: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    seq = PROMPT + RESPONSE
    ids = torch.randint(3, vocab, (ROWS, seq), generator=g)
    prompt = torch.randint(PROMPT // 4, PROMPT + 1, (ROWS,), generator=g)
    response = torch.randint(RESPONSE // 4, RESPONSE + 1, (ROWS,), generator=g)
    cols = torch.arange(seq)
    mask = ((cols >= PROMPT - prompt[:, None]) & (cols < PROMPT + response[:, None])).long()
    return {
        "input_ids": ids * mask,
        "attention_mask": mask,
        "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
        "responses": (ids * mask)[:, PROMPT:],
        "response_mask": mask[:, PROMPT:],
    }


def _run(packed: bool, kernel: str | None) -> tuple[torch.Tensor, str, int]:
    config = AutoConfig.from_pretrained(HALF_B)
    torch.manual_seed(0)
    with torch.device("cuda"):
        module = AutoModelForCausalLM.from_config(config)
    override = {"attn_implementation": kernel} if kernel else {}
    model = tiny_model(HALF_B, use_remove_padding=packed, override_config=override)
    ref = FSDPEngine(
        model, fp32_fsdp(mixed_precision=BF16), init_device_mesh("cuda", (1,)), role="ref", module=module
    )
    del module
    batch = _batch(config.vocab_size)
    # the peak up to the LM head: the decoder stack, where attention's mask lives (the logits that
    # follow are the same size on every path and would hide it)
    stack_peaks = []
    head = ref.module.get_output_embeddings()
    hook = head.register_forward_pre_hook(lambda *_: stack_peaks.append(torch.cuda.max_memory_allocated()))
    compute_log_prob(ref, batch, micro_size=ROWS, max_token_len=None, temperature=1.0, phase="warm-up")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    logp = compute_log_prob(ref, batch, micro_size=ROWS, max_token_len=None, temperature=1.0, phase="lp")
    hook.remove()
    peak = stack_peaks[-1] - base
    kernel_run = ref.module.config._attn_implementation
    del ref
    torch.cuda.empty_cache()
    return logp * batch["response_mask"], kernel_run, peak


def test_packed_rows_run_a_varlen_or_block_sparse_kernel_with_the_padded_log_probs():
    padded, _, _ = _run(packed=False, kernel="sdpa")
    dense, _, dense_peak = _run(packed=True, kernel="sdpa")
    varlen, kernel, peak = _run(packed=True, kernel=None)  # verl's default: flash_attention_2
    assert kernel in ("flash_attention_2", "flex_attention"), kernel
    diff = (varlen - padded).abs()
    print(
        f"packed {kernel}: max |dlogp| {diff.max():.3e}, mean {diff.mean():.3e} vs padded sdpa; "
        f"decoder-stack peak {peak / 2**20:.0f} MiB vs packed sdpa {dense_peak / 2**20:.0f} MiB"
    )
    assert diff.max() < 0.1 and diff.mean() < 1e-2, "bf16 kernels agree to rounding"
    assert (dense - padded).abs().max() < 0.1
    tokens = int(_batch(AutoConfig.from_pretrained(HALF_B).vocab_size)["attention_mask"].sum())
    mask_bytes = tokens**2  # packed sdpa's boolean (T, T) block-causal mask alone
    assert peak < dense_peak - mask_bytes // 2, "no (T, T) mask"

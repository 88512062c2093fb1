"""vLLM's own engine-argument rules, checked at start-up against the rollout config and the model's config.

Inside a worker, `LLM(...)` refuses these with an error Ray cannot always pass back cleanly, after
Ray and FSDP2 have started. The rules are vLLM 0.32's (vllm/config/scheduler.py, model.py,
parallel.py and the CPU attention backend), written as numbers so that checking them needs no
vLLM import (which takes seconds):

- max_num_batched_tokens >= max_num_seqs (the scheduler fills a step with at least one token per
  sequence);
- without chunked prefill, max_num_batched_tokens >= max_model_len (a prompt is prefilled in one step);
- max_model_len <= the model's positions (max_position_embeddings, times a linear/dynamic RoPE factor);
- the attention heads split evenly over tensor_model_parallel_size;
- on CPU: a head size the CPU attention kernels have, a KV cache block (engine_kwargs.vllm.block_size)
  that is a multiple of 32 tokens, and a KV cache (cpu_kv_cache_gb) that holds one sequence of
  max_model_len tokens in whole blocks;
- the model's architecture (config.json's `architectures`) is one vLLM's model registry runs for
  generation, or a transformers class its Transformers backend can run. The registry's names are
  read from its source file, not imported (vLLM's own error lists all ~400 of them in one line).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os

KEY = "actor_rollout_ref.rollout"
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
GB = 1024**3
# The KV cache block the hybrid engine asks for on CPU where engine_kwargs.vllm.block_size is not set.
# vLLM's CPU platform defaults to 128 tokens; its CPU kernels take any multiple of 32. Writing a decode
# step's keys and values costs in proportion to the block (21m, 32 sequences, fp32: 283 us a layer at
# 32, 487 us at 128) and the decode attention is faster too (1.15 ms against 1.40 ms), so a generate
# of 32 x 110 tokens takes 3.11 s against 3.31 s; 8 x 1,024 tokens: 19.6 s against 20.0 s
# (docs/performance.md, "The KV cache block on CPU").
CPU_BLOCK_SIZE = 32
CPU_BLOCK_MULTIPLE = 32  # vLLM 0.32's CPU_ATTN backend: get_supported_kernel_block_sizes


def cpu_block_size(r) -> int | None:
    """The KV cache block, in tokens, the engine runs with on CPU (None: a configured value that is
    not an integer, which `check_engine_args` reports)."""
    value = dict(r.engine_kwargs.vllm).get("block_size")
    if value is None:
        return CPU_BLOCK_SIZE
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def derived_max_len(config: dict) -> int | None:
    """The longest sequence vLLM accepts for this model without VLLM_ALLOW_LONG_MAX_MODEL_LEN."""
    positions = config.get("max_position_embeddings")
    if not isinstance(positions, int):
        return None
    rope = config.get("rope_scaling") or config.get("rope_parameters") or {}
    if rope.get("rope_type", rope.get("type")) in ("linear", "dynamic") and rope.get("factor"):
        return int(positions * rope["factor"])
    return positions


def head_size(config: dict) -> int | None:
    if isinstance(config.get("head_dim"), int):
        return config["head_dim"]
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    return hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads else None


# the tables of vllm/model_executor/models/registry.py whose models generate text
GENERATION_TABLES = (
    "_TEXT_GENERATION_MODELS",
    "_MULTIMODAL_MODELS",
    "_TRANSFORMERS_SUPPORTED_MODELS",
    "_TRANSFORMERS_BACKEND_MODELS",
)


@functools.cache
def vllm_generation_architectures() -> frozenset[str]:
    """Architecture names vLLM's registry maps to a generation model (empty if vLLM is not here)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    file = os.path.join(spec.submodule_search_locations[0], "model_executor", "models", "registry.py")
    if not os.path.exists(file):
        return frozenset()
    with open(file) as f:
        tree = ast.parse(f.read())
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node.value if hasattr(node, "value") else None, ast.Dict) and any(
            isinstance(t, ast.Name) and t.id in GENERATION_TABLES for t in targets
        ):
            names |= {
                k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
            }
    return frozenset(names)


def architecture_problems(config: dict, model_key: str) -> list[str]:
    """Every architecture config.json names is one vLLM can generate with."""
    import transformers

    known = vllm_generation_architectures()
    if not known:
        return []
    unknown = [
        a for a in config.get("architectures") or [] if a not in known and not hasattr(transformers, a)
    ]
    return (
        [
            f"{model_key}: config.json's architectures {unknown} are not models vLLM runs ({len(known)} are, e.g. "
            f"Qwen2ForCausalLM, LlamaForCausalLM), nor transformers classes its Transformers backend could run; "
            f"fix config.json's architectures, or use {KEY}.name=hf"
        ]
        if unknown
        else []
    )


def check_engine_args(r, config: dict, model_key: str, on_gpu: bool) -> list[str]:
    """Problems with the rollout section `r` (normalised: max_model_len set) for the model `config`."""
    problems = architecture_problems(config, model_key)
    if r.max_num_batched_tokens < r.max_num_seqs:
        problems.append(
            f"{KEY}.max_num_batched_tokens={r.max_num_batched_tokens} is below {KEY}.max_num_seqs="
            f"{r.max_num_seqs}; vLLM needs max_num_batched_tokens >= max_num_seqs: raise it or lower max_num_seqs"
        )
    limit = derived_max_len(config)
    # prompt + response beyond the positions is reported for every rollout (preflight); here only a
    # max_model_len set longer than the sequences need
    if limit is not None and r.max_model_len > limit >= r.prompt_length + r.response_length:
        problems.append(
            f"{KEY}.max_model_len={r.max_model_len} exceeds the model's {limit} positions ({model_key}); "
            f"set it to at most {limit} (or null: prompt_length + response_length)"
        )
    heads, tp = config.get("num_attention_heads"), r.tensor_model_parallel_size
    if isinstance(heads, int) and tp > 0 and heads % tp:
        problems.append(
            f"{KEY}.tensor_model_parallel_size={tp} does not divide the model's {heads} attention heads "
            f"({model_key}); use a divisor of {heads}"
        )
    if not on_gpu:
        problems += _cpu_problems(r, config, model_key)
    return problems


def _cpu_problems(r, config: dict, model_key: str) -> list[str]:
    problems = []
    size = head_size(config)
    if size is not None and size not in CPU_HEAD_SIZES:
        problems.append(
            f"{model_key}: head size {size} (hidden_size / num_attention_heads) has no vLLM CPU attention kernel "
            f"(sizes {list(CPU_HEAD_SIZES)}); use {KEY}.name=hf on this machine, or a GPU"
        )
    block = cpu_block_size(r)
    if block is None or block <= 0 or block % CPU_BLOCK_MULTIPLE:
        value = dict(r.engine_kwargs.vllm).get("block_size")
        problems.append(
            f"{KEY}.engine_kwargs.vllm.block_size={value!r}: vLLM's CPU attention takes KV cache blocks of a "
            f"positive multiple of {CPU_BLOCK_MULTIPLE} tokens; use e.g. {CPU_BLOCK_SIZE}, or leave it unset"
        )
        block = CPU_BLOCK_SIZE
    layers, kv_heads = config.get("num_hidden_layers"), config.get("num_key_value_heads")
    kv_heads = kv_heads or config.get("num_attention_heads")
    tp = max(1, r.tensor_model_parallel_size)
    if size and isinstance(layers, int) and isinstance(kv_heads, int):
        per_token = 2 * layers * max(1, kv_heads // tp) * size * DTYPE_BYTES.get(r.dtype, 4)
        need = per_token * -(-r.max_model_len // block) * block  # whole blocks
        if need > r.cpu_kv_cache_gb * GB:
            problems.append(
                f"{KEY}.cpu_kv_cache_gb={r.cpu_kv_cache_gb} cannot hold one sequence of max_model_len="
                f"{r.max_model_len} tokens in blocks of {block} ({need / GB:.4f} GiB of KV cache); raise it "
                f"to at least {need / GB:.4f}"
            )
    return problems

"""HF rollout vs vLLM rollout on the same model, prompts and sampling; weight-sync time vs size.

    python scripts/bench_rollout.py                      # the default sizes, 2 threads
    python scripts/bench_rollout.py --sizes tiny,256x4 --threads 1

For each model size a fresh process (vLLM's engine owns process-wide state, so one engine per
process) builds a 1-rank gloo group, the FSDP2 actor engine, the HF rollout and the vLLM rollout,
exactly as a worker does. It then times, after one warm-up call each:
  - generation: the same left-padded prompts, n samples, ignore_eos (so both produce the same number
    of tokens), temperature 1, sampled tokens per second for each backend and their ratio (the
    fastest of --repeats calls, HF and vLLM calls interleaved);
  - weight sync: actor gather (`iter_full_params`) + vLLM `reload_weights` + prefix-cache reset,
    the mean of several syncs, against the parameter count.
Sizes: `tiny` is the embedded warm-started model; `HxL` a random Qwen2 with hidden H and L layers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

DEFAULT_SIZES = "tiny,256x4,512x4,768x8"


def build_model_dir(size: str, root: str) -> str:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from verl_lite.data import assets
    from verl_lite.data.tiny_tokenizer import build_tokenizer

    if size == "tiny":
        return assets.resolve("verl_lite://tiny-qwen2-arith")
    hidden, layers = (int(x) for x in size.split("x"))
    tokenizer = build_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=max(1, hidden // 256),
        max_position_embeddings=256,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    path = os.path.join(root, size)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_prompts(num_prompts: int, prompt_len: int, vocab: int, pad_id: int):
    import torch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (num_prompts, prompt_len), generator=g)
    lengths = torch.randint(prompt_len // 2, prompt_len + 1, (num_prompts,), generator=g)
    mask = (torch.arange(prompt_len).unsqueeze(0) >= prompt_len - lengths.unsqueeze(1)).long()
    return torch.where(mask.bool(), ids, torch.full_like(ids, pad_id)), mask


def timed_generate(rollouts: dict, ids, mask, params, repeats: int) -> dict[str, float]:
    """Fastest of `repeats` calls per backend, the backends interleaved call by call: on a shared
    machine a burst of load then hits both alike, and the fastest call is the least disturbed."""
    best = {name: float("inf") for name in rollouts}
    for rollout in rollouts.values():
        rollout.generate_tokens(ids, mask, params)  # warm-up
    for _ in range(repeats):
        for name, rollout in rollouts.items():
            start = time.perf_counter()
            tokens, _ = rollout.generate_tokens(ids, mask, params)
            best[name] = min(best[name], time.perf_counter() - start)
            assert tokens.shape[1] == params.response_length, "ignore_eos: every sample runs to the end"
    return best


def bench_one(args) -> dict:
    """One model size, in this (fresh) process."""
    import torch
    import torch.distributed as dist

    from verl_lite.config.compose import load_config
    from verl_lite.engine.fsdp_engine import FSDPEngine
    from verl_lite.engine.mesh import build_layout
    from verl_lite.rollout.base import SamplingParams
    from verl_lite.rollout.hf_rollout import HFRollout
    from verl_lite.rollout.vllm_rollout import VLLMRollout
    from verl_lite.utils.hf_model import load_tokenizer

    torch.set_num_threads(args.threads)
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("gloo", rank=0, world_size=1, timeout=datetime.timedelta(seconds=600))
    with tempfile.TemporaryDirectory() as root:
        seq_len = args.prompt_len + args.response_len
        arr = load_config(  # the demo's sections (fp32, eager vLLM, TP 1) with this benchmark's sizes
            [
                f"actor_rollout_ref.model.path={build_model_dir(args.size, root)}",
                f"data.max_prompt_length={args.prompt_len}",
                f"data.max_response_length={args.response_len}",
                f"actor_rollout_ref.rollout.max_model_len={seq_len}",
                f"actor_rollout_ref.rollout.cpu_kv_cache_gb={args.kv_cache_gb}",
            ],
            "demo",
        ).actor_rollout_ref
        model_cfg, rollout_cfg = arr.model, arr.rollout
        tokenizer = load_tokenizer(model_cfg.path)
        actor = FSDPEngine(model_cfg, arr.actor.fsdp_config, build_layout("cpu"), role="actor")
        hf = HFRollout(model_cfg, rollout_cfg, tokenizer, rank=0)
        vllm = VLLMRollout(model_cfg, rollout_cfg, tokenizer, rank=0)
        syncs = []
        for _ in range(args.syncs + 1):
            start = time.perf_counter()
            stats = vllm.update_weights(actor.iter_full_params(bucket_bytes=vllm.bucket_bytes))
            syncs.append(time.perf_counter() - start)
        ids, mask = make_prompts(args.prompts, args.prompt_len, len(tokenizer), tokenizer.pad_token_id)
        params = SamplingParams(n=args.n, temperature=1.0, response_length=args.response_len, ignore_eos=True)
        num_tokens = args.prompts * args.n * args.response_len
        best = timed_generate({"hf": hf, "vllm": vllm}, ids, mask, params, args.repeats)
        hf_s, vllm_s = best["hf"], best["vllm"]
    return {
        "size": args.size,
        "num_params": actor.num_params(),
        "hf_tokens_per_s": num_tokens / hf_s,
        "vllm_tokens_per_s": num_tokens / vllm_s,
        "vllm_over_hf": hf_s / vllm_s,
        "sync_s": sum(syncs[1:]) / args.syncs,  # the first sync is a warm-up
        "sync_gb": stats["update_weights_gb"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default=DEFAULT_SIZES)
    p.add_argument("--size", help=argparse.SUPPRESS)  # set in the per-size child process
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--response-len", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--syncs", type=int, default=3)
    p.add_argument("--kv-cache-gb", type=float, default=1.0)
    args = p.parse_args()
    if args.size:
        print("RESULT " + json.dumps(bench_one(args)), flush=True)
        return
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), VLLM_LOGGING_LEVEL="ERROR")
    print(
        f"{args.prompts} prompts x n={args.n} x {args.response_len} tokens (prompt <= {args.prompt_len}), "
        f"temperature 1, ignore_eos, fp32, {args.threads} threads"
    )
    print(
        f"{'model':>8} {'params':>11} {'hf tok/s':>9} {'vllm tok/s':>10} {'vllm/hf':>7} {'sync s':>7} {'sync GB':>8}"
    )
    for size in args.sizes.split(","):
        options = {k: v for k, v in vars(args).items() if k not in ("sizes", "size")}
        argv = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
        cmd = [sys.executable, __file__, f"--size={size}", *argv]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            print(f"{size}: failed\n{proc.stderr[-3000:]}")
            continue
        r = json.loads(lines[-1][len("RESULT ") :])
        print(
            f"{r['size']:>8} {r['num_params']:>11,} {r['hf_tokens_per_s']:>9.0f} {r['vllm_tokens_per_s']:>10.0f} "
            f"{r['vllm_over_hf']:>7.2f} {r['sync_s']:>7.3f} {r['sync_gb']:>8.4f}",
            flush=True,
        )


if __name__ == "__main__":
    main()

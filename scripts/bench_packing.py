"""Padded vs packed (use_remove_padding) forward+backward: time, tokens computed, and agreement.

Builds a random Qwen2 in memory (no download), a batch whose sequences have random lengths inside
a fixed padded width (left-padded prompts, right-padded responses, verl's layout), and times
forward+backward of the padded batch and of the same batch packed by verl_lite.engine.packing.
Prints both times and their ratio from one run, the share of positions that are padding, and the
largest log-prob difference between the two paths on real tokens.

    python scripts/bench_packing.py                       # CPU, fp32, 1 thread
    python scripts/bench_packing.py --hidden 512 --layers 8 --batch 64 --device cuda
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from verl_lite.engine.packing import packed_forward, plan_pack


def make_batch(batch: int, prompt: int, response: int, vocab: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    p_len = torch.randint(prompt // 4, prompt + 1, (batch,), generator=g)
    r_len = torch.randint(1, response + 1, (batch,), generator=g)
    p_mask = (torch.arange(prompt)[None] >= prompt - p_len[:, None]).long()
    r_mask = (torch.arange(response)[None] < r_len[:, None]).long()
    mask = torch.cat([p_mask, r_mask], -1)
    ids = torch.randint(3, vocab, mask.shape, generator=g) * mask
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def timed(fn, reps: int, device: str) -> float:
    fn()  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--response", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    vocab = 1024
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=args.hidden,
        intermediate_size=2 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64,
        num_key_value_heads=1,
        max_position_embeddings=args.prompt + args.response,
    )
    model = Qwen2ForCausalLM(config).to(args.device)
    ids, mask, pos = (t.to(args.device) for t in make_batch(args.batch, args.prompt, args.response, vocab, 0))

    def forward_padded():
        return model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits

    def forward_packed():
        return packed_forward(model, ids, plan_pack(mask, pos).to(ids.device)).logits

    def padded():
        (forward_padded() * mask[..., None]).sum().backward()

    def packed():
        forward_packed().sum().backward()

    t_pad, t_pack = timed(padded, args.reps, args.device), timed(packed, args.reps, args.device)
    with torch.no_grad():
        real = mask.bool()
        lp_pad = forward_padded().log_softmax(-1)[real]
        lp_pack = forward_packed().log_softmax(-1)[real]
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params, {args.device}")
    padding = 1 - mask.float().mean().item()
    print(
        f"batch: {args.batch} x {ids.shape[1]} positions, {int(mask.sum())} real tokens ({padding:.0%} padding)"
    )
    print(
        f"forward+backward: padded {t_pad * 1e3:.1f} ms, packed {t_pack * 1e3:.1f} ms, x{t_pad / t_pack:.2f}"
    )
    print(f"max |log-prob difference| on real tokens: {(lp_pad - lp_pack).abs().max().item():.2e}")


if __name__ == "__main__":
    main()

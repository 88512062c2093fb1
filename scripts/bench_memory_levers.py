"""What the long-sequence memory levers buy, measured: ratios from one run.

    python scripts/bench_memory_levers.py                  # the issue's sizes (needs ~16 GB free host memory)
    python scripts/bench_memory_levers.py --dry            # tiny sizes: checks the script

1. Log-probs without the full logits (`use_fused_kernels`, algos/chunked_logprob.py): the log-prob step
   at a vocabulary of 151,936 (Qwen2.5's) and 4k tokens of hidden size 896 (Qwen2.5-0.5B's), float32:
   (a) the old-log-prob pass (no grad, log-probs only) and (b) an update's head (log-probs and entropy,
   forward and backward), plain (`lm_head` logits -> log_softmax) against fused (chunks of the logits,
   recomputed in backward). Peak = the largest number of bytes the CPU allocator had handed out above
   what existed when the step began, read from the PyTorch profiler's memory events (c10's allocator
   reports every allocation and free to it). Time = fastest of --repeats unprofiled runs.
2. Ulysses sequence parallelism (engine/ulysses.py): one long sequence (and a row packing two) through
   a small Qwen2, forward and backward; per-rank activation bytes (the unique storages autograd saves
   for backward, parameters excluded, counted with saved-tensor hooks) at sp=2 on 2 gloo ranks against
   sp=1, and the share of the sp=2 step spent in the all-to-alls (timed around each exchange).
3. Activation offload (engine/activation_offload.py), on this machine: bytes moved per training step and
   the copies' share of the step. On a CPU-only machine host and device memory are the same, so nothing
   is saved here; the saving is a GPU measurement (scripts/gpu_check.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import time

import psutil
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile

from verl_lite.algos.chunked_logprob import linear_logprob_entropy
from verl_lite.algos.logprob import entropy_from_logits, logprobs_from_logits

GIB = 1024**3


# --- 1. chunked log-probs -----------------------------------------------------------------------------
def allocator_peak(fn) -> float:
    """GiB above the start that the CPU allocator had out at its peak while `fn` ran."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    path = tempfile.mktemp(suffix=".json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    os.remove(path)
    mem = [e["args"] for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0]
    base = mem[0]["Total Allocated"] - mem[0]["Bytes"]
    return (max(m["Total Allocated"] for m in mem) - base) / GIB


def fastest(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_logprobs(tokens: int, hidden: int, vocab: int, repeats: int) -> list[tuple]:
    g = torch.Generator().manual_seed(0)
    h = torch.randn(tokens, hidden, generator=g).requires_grad_()
    w = (torch.randn(vocab, hidden, generator=g) * 0.02).requires_grad_()
    y = torch.randint(0, vocab, (tokens,), generator=g)

    def plain(train: bool):
        with torch.set_grad_enabled(train):
            logits = (h @ w.t()).float()  # what lm_head gives the actor (temperature 1)
            logp = logprobs_from_logits(logits, y)
            if train:
                (logp.sum() + 0.01 * entropy_from_logits(logits).sum()).backward()
        h.grad = w.grad = None

    def fused(train: bool):
        with torch.set_grad_enabled(train):
            logp, ent = linear_logprob_entropy(h, w, y, 1.0, with_entropy=train)
            if train:
                (logp.sum() + 0.01 * ent.sum()).backward()
        h.grad = w.grad = None

    rows = []
    for step, train in (("old log-probs (no grad)", False), ("update head (fwd+bwd, +entropy)", True)):
        need = (6 if train else 2.5) * tokens * vocab * 4 / GIB
        if psutil.virtual_memory().available / GIB < 1.3 * need:
            rows.append((step, None, None, None, f"skipped: the plain path needs ~{need:.0f} GiB free"))
            continue
        peaks = [allocator_peak(lambda f=f, t=train: f(t)) for f in (plain, fused)]
        times = [fastest(lambda f=f, t=train: f(t), repeats) for f in (plain, fused)]
        rows.append((step, peaks, times, peaks[0] / peaks[1], f"time fused/plain {times[1] / times[0]:.2f}"))
    return rows


# --- 2. Ulysses SP ------------------------------------------------------------------------------------
def _sp_worker(rank, world, port, seq_len, num_seqs, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        queue.put((rank, sp_step(seq_len, num_seqs)))
    finally:
        dist.destroy_process_group()


def sp_step(seq_len: int, num_seqs: int) -> dict:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from verl_lite.engine import ulysses

    config = Qwen2Config(
        vocab_size=2048,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    group = dist.group.WORLD
    ulysses.apply_ulysses(model, dist.get_world_size(), "ulysses_sequence_parallel_size")
    lengths = [seq_len // num_seqs] * (num_seqs - 1) + [seq_len - seq_len // num_seqs * (num_seqs - 1)]
    pos = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)  # one packed row
    ids = torch.randint(0, 2048, (1, seq_len), generator=torch.Generator().manual_seed(1))
    comm = [0.0]
    exchange = ulysses._exchange

    def timed_exchange(*args):
        start = time.perf_counter()
        out = exchange(*args)
        comm[0] += time.perf_counter() - start
        return out

    ulysses._exchange = timed_exchange
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    shard = ulysses.shard_rows(pos, group)
    start = time.perf_counter()
    with ulysses.sequence_parallel(group, shard.position_ids):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logits = model(input_ids=shard.take(ids), position_ids=shard.take(pos), use_cache=False).logits
        logp = shard.gather(logprobs_from_logits(logits, shard.take(ids.roll(-1, 1))))
        logp.sum().backward()
    step = time.perf_counter() - start
    return {"saved_bytes": sum(saved.values()), "step_s": step, "comm_s": comm[0]}


def run_sp(world: int, seq_len: int, num_seqs: int) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_sp_worker, args=(r, world, port, seq_len, num_seqs, queue)) for r in range(world)
    ]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=900) for _ in range(world))
    for p in procs:
        p.join()
    return results[0]


# --- 3. activation offload ----------------------------------------------------------------------------
def bench_activation_offload(seq_len: int) -> list[tuple]:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from verl_lite.engine.activation_offload import ActivationOffload
    from verl_lite.engine.offload import TransferLog

    rows = []
    for ckpt in (False, True):
        config = Qwen2Config(
            vocab_size=2048,
            hidden_size=256,
            intermediate_size=768,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=2,
            attn_implementation="sdpa",
        )
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config)
        if ckpt:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        ids = torch.randint(0, 2048, (1, seq_len), generator=torch.Generator().manual_seed(1))
        log = TransferLog()
        offload = ActivationOffload(torch.device("cpu"), log)
        offload.apply(list(model.model.layers))
        start = time.perf_counter()
        with offload.training_forward("update"):
            logits = model(input_ids=ids, use_cache=False).logits
        logprobs_from_logits(logits, ids.roll(-1, 1)).sum().backward()
        step = time.perf_counter() - start
        t = log.pop()["update/activations"]
        rows.append((ckpt, t.d2h_bytes / GIB, (t.d2h_s + t.h2d_s) / step))
    return rows


def log_prob_rows(args) -> None:
    print(
        f"1. log-probs, {args.tokens} tokens, hidden {args.hidden}, vocab {args.vocab}, fp32 (CPU allocator peak)"
    )
    for step, peaks, times, ratio, note in bench_logprobs(args.tokens, args.hidden, args.vocab, args.repeats):
        if peaks is None:
            print(f"   {step:34s} {note}")
            continue
        print(
            f"   {step:34s} peak plain {peaks[0]:6.2f} GiB  fused {peaks[1]:6.2f} GiB  ratio {ratio:5.1f}x  "
            f"time plain {times[0]:.2f}s fused {times[1]:.2f}s ({note})"
        )


def sp_rows(args) -> None:
    print(f"2. Ulysses SP, one row of {args.seq_len} tokens, 4-layer Qwen2 (hidden 256, 8 heads), fwd+bwd")
    for num_seqs in (1, 2):
        one, two = run_sp(1, args.seq_len, num_seqs), run_sp(2, args.seq_len, num_seqs)
        print(
            f"   {num_seqs} sequence(s): saved activation bytes per rank sp=1 {one['saved_bytes'] / GIB:.3f} GiB, "
            f"sp=2 {two['saved_bytes'] / GIB:.3f} GiB, ratio {two['saved_bytes'] / one['saved_bytes']:.2f}x; "
            f"step sp=1 {one['step_s']:.2f}s, sp=2 {two['step_s']:.2f}s, all-to-all "
            f"{two['comm_s'] / two['step_s']:.1%} of the sp=2 step"
        )
    print("   (gloo, each rank one thread of this machine; 2 sequences: the block mask is part of the bytes)")


def offload_rows(args) -> None:
    print(
        f"3. activation offload, one row of {args.seq_len} tokens, same model, fwd+bwd (CPU: no saving here)"
    )
    for ckpt, gib, share in bench_activation_offload(args.seq_len):
        print(
            f"   gradient checkpointing {ckpt!s:5s}: {gib:.3f} GiB to host and back, copies {share:.1%} of the step"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--seq-len", type=int, default=8192, help="the SP / activation-offload row length")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--parts", default="1,2,3", help="which measurements to run, e.g. 2,3")
    parser.add_argument("--dry", action="store_true", help="tiny sizes, to check the script")
    args = parser.parse_args()
    if args.dry:
        args.tokens, args.hidden, args.vocab, args.seq_len, args.repeats = 64, 32, 1000, 64, 1
    torch.set_num_threads(1)
    parts = {int(p) for p in args.parts.split(",")}
    for number, rows in ((1, log_prob_rows), (2, sp_rows), (3, offload_rows)):
        if number in parts:
            rows(args)


if __name__ == "__main__":
    main()

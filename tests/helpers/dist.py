"""Run a function on N gloo ranks in fresh processes, the way the engine runs under Ray.

Each rank is a new process with one thread, RANK/WORLD_SIZE/MASTER_* set and a short collective
timeout, so a hang fails the test instead of stalling CI.

The ranks are forked from a fork server (multiprocessing's "forkserver") that imported torch,
transformers and the engine once (`PRELOAD`), instead of spawned as bare interpreters that each
import them again: that import is ~4 s of CPU per rank, and the suite starts several hundred ranks.
The server is a clean interpreter started on first use, not a fork of pytest, and nothing has run
in it but those imports, so each rank starts as a spawned one would have after importing them. A
rank gets the caller's environment and sys.path of the moment (as a spawned process would), not
the server's.
"""

from __future__ import annotations

import datetime
import io
import os
import socket
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# what every rank imports anyway (the engine, the workers' model code), imported once by the server
PRELOAD = [
    "torch",
    "torch.distributed",
    "torch.distributed.checkpoint",
    "transformers",
    "transformers.modeling_utils",
    "transformers.models.qwen2.modeling_qwen2",
    "peft",
    "verl_lite.engine.fsdp_engine",
    "verl_lite.workers.actor_rollout_ref",
    "verl_lite.workers.critic",
]


def _context():
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # takes effect when the server starts (the first run_ranks)
    return ctx


def _entry(rank, world_size, port, fn, args, queue, environ):
    os.environ.clear()
    os.environ.update(environ)  # the caller's, as a spawned rank would have it
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    torch.set_num_threads(1)
    try:
        dist.init_process_group(
            "gloo", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=120)
        )
        result = fn(rank, world_size, *args)
        buffer = (
            io.BytesIO()
        )  # plain bytes: tensors through an mp queue would share memory with a dying process
        torch.save(result, buffer)
        queue.put((rank, "ok", buffer.getvalue()))
    except Exception:
        queue.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(fn, world_size: int, *args, timeout_s: float = 300.0) -> list:
    """fn(rank, world_size, *args) on each rank; returns the results in rank order."""
    ctx = _context()
    queue = ctx.Queue()
    port = free_port()
    environ = dict(os.environ)
    procs = [
        ctx.Process(target=_entry, args=(r, world_size, port, fn, args, queue, environ))
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    results = {}
    try:
        for _ in range(world_size):
            rank, status, payload = queue.get(timeout=timeout_s)
            if status == "error":
                raise RuntimeError(f"rank {rank} failed:\n{payload}")
            results[rank] = torch.load(io.BytesIO(payload), weights_only=False)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return [results[r] for r in range(world_size)]

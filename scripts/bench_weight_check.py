"""What the check after every weight sync costs (rollout/weight_check.py), next to the sync itself.

    python scripts/bench_weight_check.py                 # tiny (2 layers) and ~100M params, hf and vllm
    python scripts/bench_weight_check.py --models tiny --backends hf

Each (model, backend, full weights | LoRA adapter) runs in a fresh process: one gloo rank, an FSDP2
actor (fp32) and its rollout (fp32 weights) built from a random Qwen2 folder made here, one warm-up
sync, then --repeats timed syncs and checks; the fastest of each is reported (the least disturbed on
a shared machine). With vLLM the sync includes the fingerprint kept for each packed CPU GEMM layer
before its weight is dropped (vllm_reload.py): its mean time per sync is reported apart. Last line of each: `<model> <backend> <kind>: sync S ms, check C ms
(C/S)`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time

SHAPES = {"tiny": (64, 2), "100m": (1024, 12)}  # (hidden, layers) of tests/helpers/models.tiny_config


def child(model_dir: str, backend: str, kind: str, repeats: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from tests.helpers.configs import fp32_fsdp, tiny_model, tiny_optim, tiny_rollout
    from tests.helpers.dist import free_port
    from verl_lite.engine.fsdp_engine import FSDPEngine
    from verl_lite.rollout.weight_check import SyncCheck
    from verl_lite.rollout.weight_sync import build_weight_sync
    from verl_lite.utils.hf_model import load_tokenizer

    os.environ.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())
    )
    dist.init_process_group("gloo", rank=0, world_size=1, timeout=datetime.timedelta(seconds=600))
    lora = {"lora_rank": 8, "lora_alpha": 16, "target_modules": "all-linear"} if kind == "lora" else {}
    model_cfg = tiny_model(model_dir, **lora)
    actor = FSDPEngine(
        model_cfg, fp32_fsdp(), init_device_mesh("cpu", (1,)), role="actor", optim_cfg=tiny_optim()
    )
    rollout_cfg = tiny_rollout(seed=3, cpu_kv_cache_gb=0.25, max_model_len=64, load_format="dummy")
    if backend == "vllm":
        from verl_lite.rollout.vllm_rollout import VLLMRollout

        rollout = VLLMRollout(model_cfg, rollout_cfg, load_tokenizer(model_dir), rank=0)
    else:
        from verl_lite.rollout.hf_rollout import HFRollout

        rollout = HFRollout(model_cfg, rollout_cfg, load_tokenizer(model_dir), rank=0)
    sync = build_weight_sync(actor, rollout, bucket_bytes=512 << 20, dtype=torch.float32)
    check = SyncCheck(actor, rollout, backend, sent_dtype=sync.dtype)
    sync()
    check(base=True, sync=1, version=0)  # warm-up; the base is checked once, like a run's first check

    def fastest(fn) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times) * 1e3

    spent = [0.0]
    if backend == "vllm":  # the fingerprints taken inside the sync, as packed weights are dropped
        from verl_lite.rollout import vllm_reload

        real = vllm_reload.layer_shares

        def timed(*args):
            start = time.perf_counter()
            out = real(*args)
            spent[0] += time.perf_counter() - start
            return out

        vllm_reload.layer_shares = timed
    sync_ms = fastest(sync)
    check_ms = fastest(lambda: check(base=kind == "full", sync=2, version=1))
    params = sum(p.numel() for p in actor.module.parameters())
    line = f"{params / 1e6:.1f}M params"
    if spent[0]:
        line += f", of the sync {spent[0] / repeats * 1e3:.2f} ms: the packed layers' fingerprints"
    print(
        f"{line}\n{args_name(model_dir)} {backend} {kind}: sync {sync_ms:.2f} ms, check {check_ms:.2f} ms ({check_ms / sync_ms:.2f})"
    )
    if backend == "vllm":
        del rollout.llm


def args_name(model_dir: str) -> str:
    return os.path.basename(model_dir.rstrip("/"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--backends", nargs="+", default=["hf", "vllm"], choices=["hf", "vllm"])
    parser.add_argument("--kinds", nargs="+", default=["full", "lora"], choices=["full", "lora"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child[:3], args.repeats)
        return
    from tests.helpers.models import make_tiny_model_dir

    root = tempfile.mkdtemp(prefix="bench_weight_check_")
    for model in args.models:
        hidden, layers = SHAPES[model]
        folder = make_tiny_model_dir(os.path.join(root, model), num_layers=layers, hidden=hidden)
        for backend in args.backends:
            for kind in args.kinds:
                cmd = [
                    sys.executable,
                    __file__,
                    "--repeats",
                    str(args.repeats),
                    "--child",
                    folder,
                    backend,
                    kind,
                ]
                out = subprocess.run(cmd, capture_output=True, text=True)
                lines = out.stdout.strip().splitlines()
                print(
                    "\n".join(lines[-2:])
                    if out.returncode == 0
                    else f"{model} {backend} {kind}: failed\n{out.stderr[-2000:]}",
                    flush=True,
                )


if __name__ == "__main__":
    main()

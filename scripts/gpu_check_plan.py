"""The device check's plan (`gpu_check.py --plan`, printed by `gpu_check.sh --dry`): what each item of
issue 21 has in the check, in the issue's order, then every row of the table an H200 would run, in the
order it would run them, with the planner's device and host estimates and a time estimate, against the
time budget of one lent machine. Nothing is run: the same planner and gates decide on the machine.

A row's time is planned from its shape, not measured: building the model (random init on the device,
then sharding), then a warm-up and the timed updates, each its compute at a planning figure for bf16
on an H200 plus its host<->device copies at a planning link speed (and offload_policy's AdamW on the
host). The figures are stated in the output; the check's own timings replace them once it has run.
"""

from __future__ import annotations

from gpu_check import GB, does_not_fit, model_config, plan, shape_of
from gpu_check_modes import CHECKS, GPU_TESTS, row_order

H200_DEVICE_GB = 139.0  # GiB the lent machine's H200 reports (about 141 GB)
HOST_GB = 128.0  # its host memory, GiB
FLOPS = 250e12  # bf16 FLOP/s a training step reaches there (a planning figure; peak ~790e12)
LINK = 20e9  # host<->device bytes/s of the offload copies (a planning figure)
HOST_ADAM = 10e9  # bytes/s of AdamW traffic on host shards (offload_policy)
START_S = 8.0  # a row's child process: python, torch, CUDA context
LINK_S = 10.0  # before the rows, in their budget: the pinned-copy peak's child (gpu_check.run_all)


def row_seconds(shape, mode, args) -> float:
    """Planned seconds of one row: build, then (1 + steps) updates of compute and copies."""
    n = shape.num_params
    trained = n // 100 if mode.setup.get("lora_rank") else n  # LoRA's adapters: well under 1%
    tokens = args.micro_batches * args.micro_size * (args.prompt + args.response)
    compute = 8 * n * tokens / FLOPS  # forward, backward and checkpointing's recompute
    copies = 0.0
    if mode.plan_mode == "param_optimizer_offload":
        copies = (2 * 4 * n + 2 * 8 * trained) / LINK  # fp32 params in and out, both moments in and out
    elif mode.plan_mode == "offload_policy":  # bf16 gathers (twice), fp32 grads out, AdamW on the host
        copies = (2 * 2 * n + 4 * trained) / LINK + 16 * trained / HOST_ADAM
    build = 5.0 + n * 4 / 2e9  # random init on the device, sharding
    return START_S + build + (1 + args.steps) * (compute + copies)


def print_plan(args) -> int:
    device_gb = args.device_gb or H200_DEVICE_GB
    host_gb = args.host_gb or HOST_GB
    budget = args.time_budget_s
    print(
        f"gpu_check plan: one H200 ({device_gb:.0f} GiB), {host_gb:.0f} GiB host, {budget:.0f} s for the rows "
        f"(the first {LINK_S:.0f} s: the pinned-copy peak)"
    )
    print(f"{'item':<5} {'check':<58} {'part':<6} where")
    for c in CHECKS:
        print(f"{c.item:<5} {c.what:<58} {c.part:<6} {c.where}")
    tests = sum(s for _, s in GPU_TESTS)
    print(f"part tests: {len(GPU_TESTS)} files, {tests:.0f} s planned: {', '.join(f for f, _ in GPU_TESTS)}")
    print(
        f"{'row':<4} {'model':<14} {'mode':<25} {'plan GiB':>8} {'host GiB':>8} {'est s':>6} {'total s':>8}  status"
    )
    total, planned = LINK_S, 0
    models = [m.strip() for m in args.models.split(",")]
    shapes = {name: shape_of(model_config(name)) for name in models}
    for i, (name, mode) in enumerate(row_order(models), 1):
        shape = shapes[name]
        est = plan(shape, mode, args, gpu=True)
        gate = does_not_fit(
            shape, mode, est, device_gb, host_gb, gpu=True, host_gate=not args.ignore_host_gate
        )
        seconds = row_seconds(shape, mode, args)
        if gate:
            status, shown = gate + (" (--ignore-host-gate runs it)" if "host" in gate else ""), 0.0
        elif total + seconds > budget:
            status, shown = "not run: time budget spent", 0.0
        else:
            status, shown, planned = "runs", seconds, planned + 1
        total += shown
        print(
            f"{i:<4} {name:<14} {mode.name:<25} {est.update / GB:>8.1f} {est.host / GB:>8.1f} "
            f"{seconds:>6.0f} {total:>8.0f}  {status}"
        )
    print(
        f"rows: {planned} of {i} run, {total:.0f} s of {budget:.0f} s (planning figures: {FLOPS / 1e12:.0f} "
        f"TFLOP/s, host link {LINK / 1e9:.0f} GB/s, host AdamW {HOST_ADAM / 1e9:.0f} GB/s)"
    )
    return 0

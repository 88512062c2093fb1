"""trainer.auto_offload through the real CLI: the planner's choice reaches the workers' engines.

The budget is set (trainer.device_memory_gb) between what offload_policy and what no offload needs
for the tiny model, so the only honest choice is offload_policy; the run must say so in its log and
its metrics must show offload_policy's host<->device traffic.
"""

import logging

import pytest

from tests.test_main_ppo import SMALL, read_metrics, run_cli
from verl_lite.engine.model_shape import read_shape
from verl_lite.planner.auto_offload import auto_offload, resolve_auto_offload
from verl_lite.planner.cli import compose_config
from verl_lite.planner.recommend import plan_rows, recommend
from verl_lite.planner.request import HEADROOM, Request
from verl_lite.roles import run_of

pytestmark = pytest.mark.slow
GB = 1024**3


def _budget_forcing_offload_policy() -> tuple[float, int]:
    cfg = compose_config(SMALL, "demo")
    shape, world = read_shape(cfg.actor_rollout_ref.model.path), 2
    rows = plan_rows(Request(cfg, shape, world, 1.0, accelerator=False))  # as the trainer plans on CPU
    cheapest_other = min(r.estimate.peak for r in rows if r.mode != "offload_policy")
    budget = 0.99 * cheapest_other / HEADROOM / GB  # just too small for any mode but offload_policy
    rec = recommend(Request(cfg, shape, world, budget, accelerator=False))
    assert rec.mode == "offload_policy"
    return budget, rec


def test_auto_offload_applies_the_planner_choice(tmp_path):
    budget, rec = _budget_forcing_offload_policy()
    micro = rec.micro
    proc = run_cli(
        tmp_path, *SMALL, "trainer.auto_offload=True", f"trainer.device_memory_gb={budget}", join=True
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout + proc.stderr
    line = next((x for x in out.splitlines() if "auto_offload:" in x), "")
    assert "(trainer.device_memory_gb), host unchecked (CPUs: the device is the host)" in line, out[-3000:]
    assert "actor_rollout_ref.actor.fsdp_config.offload_policy=True" in line
    assert f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}" in line
    chosen = "+".join((rec.mode, *rec.levers))
    assert f"do not fit even at the smallest micro-batch; {chosen} with micro-batch {micro} " in line
    assert "health: CPU-only run" in out, "the trainer runs the health checks after each step"
    rows = read_metrics(tmp_path)
    assert rows[1]["perf/offload/policy_h2d_gb"] > 0, "the engines must really run with offload_policy"


def test_auto_offload_uses_the_smallest_reported_device_and_names_the_key_when_nothing_fits(caplog):
    cfg = compose_config([*SMALL, "trainer.auto_offload=True"], "demo")
    run = run_of(cfg, num_gpus=0)
    with caplog.at_level(logging.INFO, logger="verl_lite.planner.auto_offload"):
        assert resolve_auto_offload(cfg, run, [(8.0, 64.0), (4.0, 64.0)]) == []
    assert "4.00 GB per device (the smallest device the workers report)" in caplog.text
    assert (
        cfg.actor_rollout_ref.actor.fsdp_config.offload_policy is False
    )  # the tiny model fits without offload
    cfg.trainer.device_memory_gb = 1e-6
    (problem,) = resolve_auto_offload(cfg, run, [(8.0, 64.0)])
    assert problem.startswith("trainer.auto_offload=True: no offload mode fits")


def test_on_gpus_the_nodes_host_memory_is_checked_too():
    """Qwen2.5-7B GRPO on one 141 GB GPU: a node with 80 GB of host free is refused, naming the host
    and the node that would hold manual offload's state; a node with 128 GB gets param+optimizer
    offload; on CPUs the device is the host and the host figure is not applied twice."""
    from tests.planner.test_recommend import overrides as seven_b

    cfg = compose_config(seven_b(1, 16, "vllm"))
    with pytest.raises(ValueError, match=r"trainer.auto_offload=True: no offload mode fits 80.0 GB of host"):
        auto_offload(cfg, reported_gb=[141.0], accelerator=True, host_gb=80.0)
    overrides, message = auto_offload(cfg, reported_gb=[141.0], accelerator=True, host_gb=128.0)
    assert (
        overrides["actor.fsdp_config.param_offload"]
        is overrides["actor.fsdp_config.optimizer_offload"]
        is True
    )
    assert (
        "141.00 GB per device (the smallest device the workers report), 128.0 GB of host per node" in message
    )
    small = compose_config(SMALL, "demo")
    _, message = auto_offload(small, reported_gb=[8.0], accelerator=False, host_gb=1e-6)
    assert "host unchecked (CPUs: the device is the host)" in message

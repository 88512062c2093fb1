"""What only a CUDA device can show: where offloaded state really lives, pinned host memory, and
the memory planner's estimate against the measured peak. Run by scripts/gpu_check.sh.

One process, world size 1, its own process group (nccl for device tensors, gloo for host ones):
the GPU machine has no Ray or Hydra.
"""

import gc
import os

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from transformers import AutoConfig, AutoModelForCausalLM

from tests.helpers.configs import fp32_fsdp, tiny_actor, tiny_model
from tests.helpers.dist import free_port
from tests.helpers.model_configs import HALF_B
from tests.helpers.models import make_ppo_batch
from verl_lite.config.schema import FSDPConfig, MixedPrecisionConfig, OptimConfig
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.engine.memory_model import EngineSetup, estimate, read_shape
from verl_lite.utils import device as dev
from verl_lite.workers.actor import PPOActor, compute_log_prob

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (scripts/gpu_check.sh)"),
]


@pytest.fixture(scope="module", autouse=True)
def group():
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dev.set_local_device()
    dist.init_process_group(dev.dist_backend(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _actor(model_dir, fsdp: FSDPConfig, module=None):
    cfg = tiny_actor(grad_clip=1.0)
    cfg.clip_ratio_low = cfg.clip_ratio_high = 0.2
    cfg.optim = OptimConfig(lr=1e-3, total_training_steps=4)
    engine = FSDPEngine(
        tiny_model(model_dir, enable_gradient_checkpointing=True),
        fsdp,
        init_device_mesh("cuda", (1,)),
        role="actor",
        optim_cfg=cfg.optim,
        grad_clip=1.0,
        module=module,
    )
    return engine, PPOActor(engine, cfg, response_length=5, temperature=1.0)


def _local_devices(engine) -> set[str]:
    return {p.to_local().device.type for p in engine.module.parameters()}


def _param_bytes(engine) -> list[int]:
    return [p.to_local().untyped_storage().nbytes() for p in engine.module.parameters()]


def test_manual_offload_keeps_params_and_moments_on_pinned_host_between_phases(tiny_model_dir):
    engine, actor = _actor(tiny_model_dir, fp32_fsdp(param_offload=True, optimizer_offload=True))
    home = engine.offload.param_home
    assert max(_param_bytes(engine)) == 0, "no device storage between phases"
    assert (
        home.pinned
        and home.data.is_pinned()
        and home.nbytes >= sum(p.numel() * 4 for p in engine.module.parameters())
    )
    with engine.phase("probe"):
        assert _local_devices(engine) == {"cuda"} and min(_param_bytes(engine)) > 0
    batch = make_ppo_batch(vocab=110, bs=8, seed=1)
    for _ in range(2):
        actor.update(batch, mini_size=8, micro_size=2)
    assert max(_param_bytes(engine)) == 0
    moments = [v for s in engine.optimizer.state.values() for v in s.values() if v.dim() > 0]
    assert moments and all(m.to_local().device.type == "cpu" and m.to_local().is_pinned() for m in moments)
    registered = dev.pinned_host_bytes()["registered"]
    assert registered >= engine.offload.pinned_bytes() > 0, "exact-size pinned buffers are counted"


def test_ref_params_stay_on_the_host_between_its_uses(tiny_model_dir):
    ref = FSDPEngine(
        tiny_model(tiny_model_dir),
        fp32_fsdp(param_offload=True),
        init_device_mesh("cuda", (1,)),
        role="ref",
    )
    batch = make_ppo_batch(vocab=110, bs=8, seed=2)
    for _ in range(2):
        assert max(_param_bytes(ref)) == 0
        compute_log_prob(ref, batch, micro_size=4, max_token_len=None, temperature=1.0, phase="ref")
    assert max(_param_bytes(ref)) == 0


def test_phase_exit_returns_cached_device_blocks(tiny_model_dir):
    """A block freed inside a phase is cached by the allocator until the phase ends, then returned
    (the next phase may be another process's on the same GPU)."""
    engine, _ = _actor(tiny_model_dir, fp32_fsdp())
    size = 512 * 2**20
    with engine.phase("probe"):
        block = torch.empty(size, dtype=torch.uint8, device="cuda")
        del block
        cached = torch.cuda.memory_reserved()
    assert torch.cuda.memory_reserved() <= cached - size


def test_offload_modes_use_pinned_memory_and_match_no_offload(tiny_model_dir):
    """offload_policy, and manual offload with its side-stream copies (params arriving unit by unit,
    moments streamed around the step: a missing wait would read stale or half-copied shards)."""
    batch = make_ppo_batch(vocab=110, bs=8, seed=3)
    results = {}
    modes = {
        "none": fp32_fsdp(),
        "policy": fp32_fsdp(offload_policy=True),
        "manual": fp32_fsdp(param_offload=True, optimizer_offload=True),
    }
    for name, fsdp in modes.items():
        engine, actor = _actor(tiny_model_dir, fsdp)
        if name == "policy":
            assert _local_devices(engine) == {"cpu"}
            assert all(p.to_local().is_pinned() for p in engine.module.parameters())
        history = [actor.update(batch, mini_size=8, micro_size=2)["actor/pg_loss"] for _ in range(3)]
        results[name] = history, {n: t.float().cpu() for n, t in engine.iter_full_params()}
    loss_a, params_a = results["none"]
    for name in ("policy", "manual"):
        loss_b, params_b = results[name]
        assert max(abs(a - b) for a, b in zip(loss_a, loss_b)) < 1e-4, name
        assert max((params_a[n] - params_b[n]).abs().max().item() for n in params_a) < 1e-4, name


def test_the_reference_keeps_bf16_weights_on_the_device():
    """A frozen engine's shards in its bf16 compute dtype (engine/memory_setup.storage_dtype): 2 bytes
    per parameter on the device, as the planner counts them."""
    config = AutoConfig.from_pretrained(HALF_B)
    with torch.device("cuda"):
        module = AutoModelForCausalLM.from_config(config)
    bf16 = MixedPrecisionConfig(param_dtype="bf16", reduce_dtype="fp32", buffer_dtype="fp32")
    torch.cuda.synchronize()
    ref = FSDPEngine(
        tiny_model(HALF_B),
        fp32_fsdp(mixed_precision=bf16),
        init_device_mesh("cuda", (1,)),
        role="ref",
        module=module,
    )
    del module
    torch.cuda.empty_cache()
    held = sum(p.to_local().numel() * p.to_local().element_size() for p in ref.module.parameters())
    num_params = sum(p.numel() for p in ref.module.parameters())
    setup = EngineSetup(
        world=1,
        mode="none",
        micro=0,
        seq_len=256,
        response_len=128,
        trains=False,
        forward_micro=2,
        model_dtype="fp32",
        param_dtype="bf16",
    )
    planned = estimate(read_shape(HALF_B), setup).resident
    print(f"reference: {held / 2**30:.2f} GiB of bf16 shards, planner {planned / 2**30:.2f} GiB")
    assert {p.to_local().dtype for p in ref.module.parameters()} == {torch.bfloat16}
    assert held == 2 * num_params and abs(planned - held) <= 0.02 * held
    del ref
    torch.cuda.empty_cache()


@pytest.mark.parametrize("mode", ["none", "param_optimizer_offload", "offload_policy"])
def test_planner_estimate_brackets_the_measured_peak(mode):
    """The estimate must not fall short of the measured peak by more than the planner's 10% headroom,
    nor overshoot it by more than 2x (then it would refuse configurations that fit)."""
    path = HALF_B
    flags = {
        "none": {},
        "param_optimizer_offload": {"param_offload": True, "optimizer_offload": True},
        "offload_policy": {"offload_policy": True},
    }[mode]
    fsdp = FSDPConfig(mixed_precision=MixedPrecisionConfig(param_dtype="bf16"), **flags)
    gc.collect()  # what an earlier case left behind is not this engine's
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    with torch.device("cuda"):
        module = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    engine, actor = _actor(path, fsdp, module=module)
    del module
    prompt = response = 128
    actor.response_length = response
    rows, micro = 8, 2
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 150_000, (rows, prompt + response), generator=g)
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "position_ids": torch.arange(prompt + response).expand(rows, -1).clone(),
        "responses": ids[:, prompt:].clone(),
        "response_mask": torch.ones(rows, response, dtype=torch.long),
        "advantages": torch.randn(rows, response, generator=g),
        "old_log_probs": -torch.rand(rows, response, generator=g),
    }
    actor.update(batch, mini_size=rows, micro_size=micro)  # creates the optimizer state
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    actor.update(batch, mini_size=rows, micro_size=micro)
    measured = torch.cuda.max_memory_allocated() - base
    setup = EngineSetup(
        world=1,
        mode=mode,
        micro=micro,
        seq_len=prompt + response,
        response_len=response,
        model_dtype="fp32",
        param_dtype="bf16",
        reduce_dtype="fp32",
        grad_checkpointing=True,
        pinned_host=True,
    )
    est = estimate(read_shape(path), setup).update
    print(
        f"{mode}: measured peak {measured / 2**30:.2f} GiB, estimate {est / 2**30:.2f} GiB ({measured / est:.2f}x)"
    )
    assert measured <= 1.1 * est and est <= 2 * measured
    del actor, engine
    torch.cuda.empty_cache()

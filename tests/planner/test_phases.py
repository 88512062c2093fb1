"""Phase-by-phase device memory of a whole run (planner/phases.py) for a Qwen2.5-7B GRPO/PPO run.

Each test composes main_ppo's config through Hydra (the planner's own path) and checks a phase's
total against the engines' terms (tested by hand in tests/planner/test_engine_memory.py) and the
rollout's, written out here.
"""

import pytest

from tests.helpers.model_configs import HALF_B, MLP, SEVEN_B, H, N, V
from verl_lite import roles
from verl_lite.engine.model_shape import read_shape
from verl_lite.planner.cli import compose_config
from verl_lite.planner.phases import PROCESS_OVERHEAD, plan_device, plan_rollout_group
from verl_lite.planner.request import GB, HEADROOM, MB, Choice, Request
from verl_lite.rollout import ROLLOUTS, Backend
from verl_lite.rollout.memory import RolloutMemory

DEVICE = 80 * GB


def plan_8x(cfg, shape, device: int, accelerator: bool = True, levers=(), idle_on_host=None):
    """The plan of `cfg` on 8 devices of `device` bytes, the actor without offload at micro-batch 4."""
    req = Request(cfg, shape, 8, device / GB, accelerator=accelerator)
    return plan_device(req, Choice("none", 4, levers), idle_on_host)


def config(*extra: str):
    """8 GPUs, GRPO, 64 prompts x 4, 512 + 512 tokens, bf16 vLLM at 0.5 of the device, no KL."""
    return compose_config(
        [
            f"actor_rollout_ref.model.path={SEVEN_B}",
            "trainer.n_gpus_per_node=8",
            "algorithm.adv_estimator=grpo",
            "data.train_batch_size=64",
            "data.max_prompt_length=512",
            "data.max_response_length=512",
            "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.dtype=bf16",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
            "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
            "actor_rollout_ref.rollout.update_weights_bucket_megabytes=512",
            "actor_rollout_ref.actor.ppo_mini_batch_size=32",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.actor.use_kl_loss=False",
            "algorithm.use_kl_in_reward=False",
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def shape():
    return read_shape(SEVEN_B)


def test_vllm_holds_its_share_while_generating_and_nothing_asleep(shape):
    plan = plan_8x(config(), shape, DEVICE)
    actor = plan.engines["actor"]
    assert set(plan.engines) == {"actor"} and set(plan.phases) == {
        "generate",
        "update_weights",
        "old_log_prob",
        "update_actor",
    }
    share = int(0.5 * DEVICE)  # gpu_memory_utilization x the device, claimed at start and on every wake
    assert plan.phases["generate"] == actor.resident + share
    # waking the weights only (TP=2: half of them, bf16), plus the sync's bucket and the tensor past it
    weights = N // 2 * 2
    assert plan.phases["update_weights"] == actor.resident + weights + 512 * MB + V * H * 4
    assert plan.phases["update_actor"] == actor.update, "asleep (level 2): nothing beside the update"
    assert plan.phases["old_log_prob"] == actor.forward
    assert plan.overhead == PROCESS_OVERHEAD and plan.peak == max(plan.phases.values()) + PROCESS_OVERHEAD


def test_an_awake_vllm_keeps_its_share_beside_every_phase(shape):
    plan = plan_8x(config("actor_rollout_ref.rollout.free_cache_engine=False"), shape, DEVICE)
    share = int(0.5 * DEVICE)
    assert plan.phases["update_actor"] == plan.engines["actor"].update + share
    assert plan.phases["update_weights"] == plan.engines["actor"].resident + share + 512 * MB + V * H * 4


def test_on_cpu_vllm_holds_weights_and_its_kv_space_and_processes_cost_nothing_extra(shape):
    cfg = config("actor_rollout_ref.rollout.cpu_kv_cache_gb=2")
    plan = plan_8x(cfg, shape, DEVICE, accelerator=False)
    held = N // 2 * 2 + 2 * GB
    assert plan.phases["update_actor"] == plan.engines["actor"].update + held
    assert plan.overhead == 0


def test_hf_keeps_a_full_copy_and_grows_a_kv_cache_while_generating(shape):
    cfg = config(
        "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.tensor_model_parallel_size=1"
    )
    plan = plan_8x(cfg, shape, DEVICE)
    copy = N * 2
    sequences = 64 * 4 // 8
    kv_cache = 2 * 28 * 512 * sequences * 1024 * 2  # K and V, 28 layers, kv dim 512, bf16
    assert plan.phases["generate"] == plan.engines["actor"].resident + copy + kv_cache + sequences * V * 4
    assert plan.phases["update_actor"] == plan.engines["actor"].update + copy


SEPARATE = (
    "trainer.v1.trainer_mode=separate_async",
    "trainer.v1.separate_async.parameter_sync_step=2",
    "trainer.v1.separate_async.num_warmup_batches=1",
    "trainer.n_gpus_per_node=4",
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=4",
)


def test_separate_async_plans_its_rollout_group_on_devices_of_its_own(shape):
    """vLLM on the group's 4 GPUs: its share, never asleep, plus a process; the weights in transit on the
    host; the trainer's devices plan as before (their hybrid engine validates)."""
    cfg = config(*SEPARATE)
    req = Request(cfg, shape, 4, DEVICE / GB, accelerator=True)
    group = plan_rollout_group(req)
    assert group.devices == 4 and group.generate == int(0.5 * DEVICE) + PROCESS_OVERHEAD
    assert group.host_per_rank == N * 2  # bf16
    # the trainer's devices hold no rollout: a sync's gather only (a bucket and the tensor past it)
    trainer = plan_device(req, Choice("none", 4))
    actor = trainer.engines["actor"]
    assert trainer.phases["generate"] == actor.resident
    assert (
        trainer.phases["update_weights"] == max(actor.resident, actor.terms["params"]) + 512 * MB + V * H * 4
    )
    assert plan_rollout_group(Request(config(), shape, 8, DEVICE / GB)) is None
    # HF: the KV cache of every batch in flight (the step's and the warm-up one) over the group's 4 ranks
    hf = config(
        *SEPARATE,
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    )
    group = plan_rollout_group(Request(hf, shape, 4, DEVICE / GB, accelerator=True))
    sequences = 2 * 64 * 4 // 4
    kv_cache = 2 * 28 * 512 * sequences * 1024 * 2
    assert group.generate == N * 2 + kv_cache + sequences * V * 4 + PROCESS_OVERHEAD


def test_kl_in_the_reward_alone_builds_the_reference_as_the_trainer_does(shape):
    cfg = config(
        "algorithm.use_kl_in_reward=True", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4"
    )
    assert roles.uses_reference(cfg) and roles.run_of(cfg, 0).ref, (
        "one rule: the planner's, the trainer's Run"
    )
    plan = plan_8x(cfg, shape, DEVICE)
    ref, actor = plan.engines["ref"], plan.engines["actor"]
    # the reference's shard stays unless its fsdp_config offloads it, in the bf16 compute dtype
    # (a frozen engine keeps no fp32 master weights: engine/model_shape.storage_dtype)
    assert ref.resident == N // 8 * 2
    assert plan.phases["ref"] == actor.resident + ref.forward
    assert plan.phases["update_actor"] == actor.update + ref.resident
    assert plan.overhead == PROCESS_OVERHEAD, "the reference lives in the actor's process"


COLOCATED = (
    "algorithm.adv_estimator=gae",
    f"critic.model.path={SEVEN_B}",
    "critic.ppo_micro_batch_size_per_gpu=4",
    "critic.forward_micro_batch_size_per_gpu=4",
    "reward_model.enable=True",
    f"reward_model.model.path={HALF_B}",
    "reward_model.micro_batch_size_per_gpu=4",
    "reward_model.model.input_tokenizer=null",
    "reward_model.use_reward_loop=False",
)


def test_a_colocated_critic_and_reward_model_share_the_device_in_processes_of_their_own(shape):
    """Where the device is the host (CPU) nothing moves: each role's state stays beside the others', and
    vLLM's weights and KV cache (no sleep mode) beside all of them."""
    cfg = config(*COLOCATED)
    plan = plan_8x(cfg, shape, DEVICE, accelerator=False)
    actor, critic, rm = (plan.engines[k] for k in ("actor", "critic", "reward_model"))
    vllm = -(-N // 2) * 2 + int(cfg.actor_rollout_ref.rollout.cpu_kv_cache_gb * GB)  # TP 2, bf16
    assert critic.resident == 3 * shard_value(8) * 4  # params + both moments, fp32
    assert plan.phases["update_critic"] == critic.update + actor.resident + rm.resident + vllm
    assert plan.phases["update_actor"] == actor.update + critic.resident + rm.resident + vllm
    assert plan.phases["values"] == critic.forward + actor.resident + rm.resident + vllm
    assert plan.phases["reward"] == rm.forward + actor.resident + critic.resident + vllm
    assert plan.phases["generate"] == actor.resident + critic.resident + rm.resident + vllm
    assert plan.overhead == 0, "no CUDA context on CPU"


def test_on_a_gpu_the_critic_and_reward_model_stay_unless_the_device_would_not_hold_them(shape):
    """The trainer's idle_on_host follows the plan: beside the actor on 80 GB (vLLM at half of it) the
    step peaks at 63 GB with their state resident, within the 72 GB headroom, so they stay; on 56 GB
    (51 GB resident > 50.4 GB) they wait on the host between their phases, and the step peaks at 40.9."""
    cfg = config(*COLOCATED)
    stays = plan_8x(cfg, shape, DEVICE)
    assert not stays.idle_on_host and stays.engines["critic"].resident == 3 * shard_value(8) * 4
    assert stays.peak == plan_8x(cfg, shape, DEVICE, idle_on_host=False).peak
    assert stays.peak <= HEADROOM * DEVICE
    small = 56 * GB
    resident = plan_8x(cfg, shape, small, idle_on_host=False)
    assert resident.peak > HEADROOM * small
    waits = plan_8x(cfg, shape, small)
    assert waits.idle_on_host and waits.engines["critic"].resident == 0
    assert waits.peak == plan_8x(cfg, shape, small, idle_on_host=True).peak <= HEADROOM * small
    assert not plan_8x(cfg, shape, small, accelerator=False).idle_on_host, "never on CPU"


def test_waiting_on_the_host_the_critic_and_reward_model_come_in_only_for_their_phases(shape):
    """idle_on_host: a critic or reward model beside the actor keeps its params and optimizer state on
    the host (exact bytes) and brings them in only for its own phases."""
    plan = plan_8x(config(*COLOCATED), shape, DEVICE, idle_on_host=True)
    actor, critic, rm = (plan.engines[k] for k in ("actor", "critic", "reward_model"))
    assert critic.resident == rm.resident == 0
    exact = shard_value(8) * 4 + 60  # every slot is 64-byte aligned: the head's 4-byte bias takes 64
    assert critic.terms["host_params"] == exact and critic.terms["host_optimizer"] == 2 * exact
    assert plan.phases["update_actor"] == actor.update, "nothing of theirs beside the actor's update"
    assert plan.phases["update_critic"] == critic.update + actor.resident
    assert plan.phases["values"] == critic.forward + actor.resident
    assert plan.phases["reward"] == rm.forward + actor.resident
    assert plan.phases["generate"] == actor.resident + int(0.5 * DEVICE)
    assert plan.overhead == 3 * PROCESS_OVERHEAD
    offloaded = plan_8x(
        config(*COLOCATED, "critic.fsdp.offload_policy=True"), shape, DEVICE, idle_on_host=True
    )
    assert offloaded.engines["critic"].terms["host_grads"] > 0, "offload_policy stays offload_policy"


def shard_value(world: int) -> int:
    """The 7B value model's shard: the backbone, a (1 x hidden) head and its bias; 152064 and 1 rows
    split over 8 ranks (the head's single row pads to one per rank)."""
    layers = 28 * 233_057_792 // world
    return layers + V * H // world + H // world + 1 * H + 1


def test_a_large_log_prob_micro_batch_is_the_peak(shape):
    cfg = config("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64")
    plan = plan_8x(cfg, shape, DEVICE)
    assert plan.peak_phase == "old_log_prob"
    # its logits alone: 64 x 1024 tokens x vocab in bf16, and three fp32 copies of the responses'
    assert plan.engines["actor"].terms["forward_activations"] > 64 * 1024 * V * 2 + 3 * 64 * 512 * V * 4


# --- memory levers (issue 13); set on the composed config until the schema accepts their keys ----------
def test_hsdp_shards_the_actor_over_fsdp_size_ranks(shape):
    cfg = config()
    cfg.actor_rollout_ref.actor.fsdp_config.fsdp_size = 4
    actor = plan_8x(cfg, shape, DEVICE).engines["actor"]
    full = plan_8x(config(), shape, DEVICE).engines["actor"]
    assert actor.terms["params"] == N // 4 * 4 == 2 * full.terms["params"], "4 shards, replicated twice"
    assert actor.resident == 3 * N // 4 * 4
    cfg.actor_rollout_ref.actor.fsdp_config.fsdp_size = 8  # == world: plain full sharding
    assert plan_8x(cfg, shape, DEVICE).engines["actor"].terms == full.terms


def test_sequence_parallel_halves_the_actor_and_reference_per_token_terms(shape):
    base = config(
        "algorithm.use_kl_in_reward=True", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4"
    )
    cfg = config(
        "algorithm.use_kl_in_reward=True", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4"
    )
    cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size = 2
    cfg.actor_rollout_ref.ref.ulysses_sequence_parallel_size = 2
    one, two = plan_8x(base, shape, DEVICE), plan_8x(cfg, shape, DEVICE)
    for role, term in (
        ("actor", "activations"),
        ("actor", "forward_activations"),
        ("ref", "forward_activations"),
    ):
        ratio = two.engines[role].terms[term] / one.engines[role].terms[term]
        assert 0.45 < ratio < 0.55, (role, term, ratio)
    assert two.engines["actor"].terms["params"] == one.engines["actor"].terms["params"]


def test_levers_the_planner_proposes_reach_actor_and_reference(shape):
    cfg = config(
        "algorithm.use_kl_in_reward=True", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4"
    )
    plain = plan_8x(cfg, shape, DEVICE)
    fused = plan_8x(cfg, shape, DEVICE, levers=("fused",))
    for role in ("actor", "ref"):
        assert (
            fused.engines[role].terms["forward_activations"]
            < plain.engines[role].terms["forward_activations"]
        )
    offloaded = plan_8x(cfg, shape, DEVICE, levers=("activation_offload",))
    actor = offloaded.engines["actor"]
    assert actor.terms["host_activations"] > 0 and offloaded.host_per_rank > plain.host_per_rank
    assert offloaded.engines["ref"].terms == plain.engines["ref"].terms, (
        "no training forward: nothing to move"
    )


NT8 = 20_185_088  # trainable parameters of 7B with rank-8 adapters on every linear (PEFT's count)


def test_with_lora_the_reference_is_the_actor_with_adapters_off(shape):
    kl = (
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
    )
    plan = plan_8x(config(*kl, "actor_rollout_ref.model.lora_rank=8"), shape, DEVICE)
    assert set(plan.engines) == {"actor"}, "no reference engine: nothing resident for it"
    actor = plan.engines["actor"]
    assert actor.terms["optimizer"] == 2 * NT8 // 8 * 4 and actor.terms["grads"] == NT8 // 8 * 4
    assert plan.phases["update_actor"] == actor.update, "nothing beside the update (vLLM asleep)"
    assert plan.phases["ref"] > plan.phases["old_log_prob"], "the ref phase runs the ref's micro-batch of 8"
    full = plan_8x(config(*kl), shape, DEVICE)
    assert full.phases["update_actor"] == full.engines["actor"].update + N // 8 * 2  # the bf16 ref
    saved = full.phases["update_actor"] - plan.phases["update_actor"]
    assert saved > (3 * 4 + 2) * (N // 8) * 0.99, "the grads and both moments of the base, the bf16 ref"


def test_a_lora_critic_trains_its_adapters_and_its_value_head(shape):
    cfg = config(
        "algorithm.adv_estimator=gae",
        f"critic.model.path={SEVEN_B}",
        "critic.ppo_micro_batch_size_per_gpu=4",
        "critic.forward_micro_batch_size_per_gpu=4",
        "critic.model.lora_rank=8",
    )
    critic = plan_8x(cfg, shape, DEVICE, accelerator=False).engines["critic"]
    # (on CPU: on a GPU too small to hold it, the critic would wait on the host, streaming its moments)
    # + the head's trained copy: (1 x hidden) and its bias split 8 ways on dim 0 pad to a row per rank
    assert critic.terms["grads"] == (NT8 // 8 + H + 1) * 4
    assert critic.terms["optimizer"] == 2 * critic.terms["grads"]


class PoolMemory:
    """A backend's memory model: a fixed pool while generating, its weights while syncing, nothing
    between rollouts (an engine that frees everything when asleep)."""

    def __init__(self, pool: int, weights: int):
        self.pool, self.weights = pool, weights

    def __call__(self, req: Request) -> RolloutMemory:
        return RolloutMemory(generate=self.pool, sync=self.weights, idle=0)


def test_a_backend_registered_in_one_place_brings_its_own_memory_model(shape, monkeypatch):
    """The planner asks the run's backend for its memory model (rollout/memory.py): a backend added
    through the registry is planned by its own model, not vLLM's or HF's; one without a model cannot
    be registered."""
    monkeypatch.setattr(ROLLOUTS, "_backends", dict(ROLLOUTS._backends))  # restored after the test
    ROLLOUTS.register(Backend("pool", "nowhere:Pool", lambda: True, PoolMemory(3 * GB, GB)))
    cfg = config()
    cfg.actor_rollout_ref.rollout.name = "hf"
    hf = plan_8x(cfg, shape, DEVICE)
    cfg.actor_rollout_ref.rollout.name = "pool"
    plan = plan_8x(cfg, shape, DEVICE)
    actor = plan.engines["actor"]
    assert plan.phases["generate"] == actor.resident + 3 * GB != hf.phases["generate"]
    assert plan.phases["update_weights"] == max(actor.resident, actor.terms["params"]) + GB
    assert plan.phases["update_actor"] == actor.update and plan.phases["old_log_prob"] == actor.forward
    with pytest.raises(TypeError, match="memory"):
        Backend("bare", "nowhere:Bare", lambda: True)


def test_start_up_writes_the_idle_decision_into_the_config_the_workers_get(shape):
    """preflight's RESOLVE_DEVICES: where the plan says the critic and reward model wait on the host,
    their fsdp sections get param_offload and optimizer_offload (what their engines then do), so the
    frozen config says it; where they fit, on CPUs, and under offload_policy nothing is written."""
    import dataclasses

    from verl_lite.planner.auto_offload import resolve_idle_on_host

    keys = ("param_offload", "optimizer_offload")

    def resolved(device_gb: float, *extra: str, use_gpu: bool = True):
        cfg = config(*COLOCATED, *extra)
        run = dataclasses.replace(roles.run_of(cfg, 8), use_gpu=use_gpu)
        assert resolve_idle_on_host(cfg, run, [(device_gb, 500.0)] * 8) == []
        return [getattr(s, k) for s in (cfg.critic.fsdp, cfg.reward_model.model.fsdp_config) for k in keys]

    assert resolved(56) == [True] * 4, "56 GB would not hold them resident (the test above)"
    assert resolved(80) == [False] * 4, "80 GB holds them: they stay, as their fsdp sections say"
    assert resolved(56, use_gpu=False) == [False] * 4, "never on CPUs: the device is the host"
    # a critic under offload_policy is never resident: only a smaller device leaves the rest too big
    assert resolved(56, "critic.fsdp.offload_policy=True") == [False] * 4
    assert resolved(30, "critic.fsdp.offload_policy=True") == [False, False, True, True], "policy stays"


def test_lora_merge_syncs_build_the_merged_weight_in_two_float32_buffers(shape):
    """model.lora.merge: the update_weights phase also holds the merge's two float32 buffers of the
    largest adapted weight (a decoder layer's MLP matrix, not the embedding) and the bucket of merged
    tensors vLLM collects (512 MB here), and nothing else moves."""
    lora = ("actor_rollout_ref.model.lora_rank=8",)
    served = plan_8x(config(*lora), shape, DEVICE)
    merged = plan_8x(config(*lora, "actor_rollout_ref.model.lora.merge=True"), shape, DEVICE)
    assert merged.phases["update_weights"] - served.phases["update_weights"] == 2 * MLP * 4 + 512 * MB
    assert {k: v for k, v in merged.phases.items() if k != "update_weights"} == {
        k: v for k, v in served.phases.items() if k != "update_weights"
    }

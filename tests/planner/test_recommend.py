"""The memory planner: its recommendations on a real shape (Qwen2.5-7B), and the CLI through Hydra."""

import re
import subprocess
import sys

import pytest

from tests.helpers.model_configs import HALF_B, SEVEN_B
from verl_lite.config.errors import ConfigError
from verl_lite.engine.model_shape import read_shape
from verl_lite.planner.cli import compose_config
from verl_lite.planner.cli import main as planner_main
from verl_lite.planner.recommend import candidates, micro_candidates, plan_rows, proposable_levers, recommend
from verl_lite.planner.request import LEVERS, Request

GB = 1024**3


def overrides(world: int, prompts: int, rollout: str, *extra: str) -> list[str]:
    """A GSM8K-like GRPO run: 512+512 tokens, bf16 compute and rollout, gradient checkpointing."""
    return [
        f"actor_rollout_ref.model.path={SEVEN_B}",
        f"trainer.n_gpus_per_node={world}",
        "algorithm.adv_estimator=grpo",
        f"data.train_batch_size={prompts}",
        "data.max_prompt_length=512",
        "data.max_response_length=512",
        "actor_rollout_ref.rollout.n=4",
        f"actor_rollout_ref.rollout.name={rollout}",
        "actor_rollout_ref.rollout.dtype=bf16",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts // 2}",
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        *extra,
    ]


@pytest.fixture(scope="module")
def shape():
    return read_shape(SEVEN_B)


def test_one_24gb_card_fits_7b_only_with_offload_policy_beside_a_sleeping_vllm(shape):
    cfg = compose_config(overrides(1, 16, "vllm", "actor_rollout_ref.rollout.gpu_memory_utilization=0.3"))
    rec = recommend(Request(cfg, shape, 1, 24))
    assert rec.mode == "offload_policy" and 2 <= rec.micro <= 8, rec.reason
    assert rec.overrides["actor.fsdp_config.offload_policy"] is True
    assert rec.overrides["actor.ppo_micro_batch_size_per_gpu"] == rec.micro
    assert "do not fit even at the smallest micro-batch; offload_policy with micro-batch" in rec.reason
    assert "(update_actor)" in rec.reason and rec.levers == ()


def test_lora_on_one_24gb_card_needs_less_than_full_tuning(shape):
    """LoRA: no grads or moments of the base, no reference copy; the fp32 base still needs offload."""
    kl = ("actor_rollout_ref.rollout.gpu_memory_utilization=0.3", "actor_rollout_ref.actor.use_kl_loss=True")
    full = compose_config(overrides(1, 16, "vllm", *kl))
    lora = compose_config(overrides(1, 16, "vllm", *kl, "actor_rollout_ref.model.lora_rank=8"))
    rec = recommend(Request(lora, shape, 1, 24))
    assert rec.mode == "offload_policy" and rec.micro == 4, rec.reason
    for f, lo in zip(plan_rows(Request(full, shape, 1, 24)), plan_rows(Request(lora, shape, 1, 24))):
        assert lo.estimate.peak < f.estimate.peak, (f.mode, f.micro)
        # without offload the host holds only the model while it loads, with or without LoRA
        assert lo.host_per_node < f.host_per_node or f.mode == "none", (f.mode, f.micro)


def test_hf_rollouts_full_copy_leaves_no_room_on_24gb(shape):
    """The HF rollout's bf16 copy (15.2 GB) stays through the update: nothing fits beside it."""
    cfg = compose_config(overrides(1, 16, "hf"))
    with pytest.raises(ValueError, match=r"no offload mode fits 24.00 GB.*offload_policy, micro-batch 1"):
        recommend(Request(cfg, shape, 1, 24))


def test_a_sleeping_vllm_leaves_the_update_more_room_than_an_awake_one(shape):
    share = "actor_rollout_ref.rollout.gpu_memory_utilization=0.3"
    asleep = compose_config(overrides(1, 16, "vllm", share))
    awake = compose_config(
        overrides(1, 16, "vllm", share, "actor_rollout_ref.rollout.free_cache_engine=False")
    )
    rows = {name: plan_rows(Request(c, shape, 1, 48)) for name, c in (("asleep", asleep), ("awake", awake))}
    best = {
        k: max((r.micro for r in v if r.fits and (r.mode, r.levers) == ("offload_policy", ())), default=0)
        for k, v in rows.items()
    }
    assert best["asleep"] > best["awake"] > 0, best
    with pytest.raises(ValueError, match="no offload mode fits"):
        recommend(Request(awake, shape, 1, 24))


def test_eight_80gb_cards_need_no_offload(shape):
    cfg = compose_config(overrides(8, 64, "vllm"))
    rec = recommend(Request(cfg, shape, 8, 80))
    assert rec.mode == "none", rec.reason
    assert rec.overrides["actor.fsdp_config.param_offload"] is False
    assert rec.overrides["actor.fsdp_config.optimizer_offload"] is False


def test_rows_cover_every_mode_and_micro_size(shape):
    cfg = compose_config(overrides(1, 16, "vllm"))
    assert micro_candidates(cfg, 1) == [1, 2, 4, 8, 16, 32]
    rows = plan_rows(Request(cfg, shape, 1, 24, levers=LEVERS))
    assert [(r.mode, r.levers, r.micro) for r in rows][:2] == [("none", (), 1), ("none", (), 2)]
    assert len(rows) == 9 * 6, "3 modes x (nothing, fused, fused + activation offload) x 6 micro sizes"
    policy = [
        r.estimate.engines["actor"].terms["activations"]
        for r in rows
        if r.mode == "offload_policy" and not r.levers
    ]
    assert policy == sorted(policy) and policy[0] < policy[-1]


def test_a_host_too_small_for_the_offloaded_state_is_refused(shape):
    """One 141 GB device fits 7B with manual offload; its host state (fp32 params and both moments,
    85 GB, beside the 2 GB process; the 28 GB load comes before them) fits a node with 128 GB, as
    on the lent H200 machine, but not one with 80: the refusal says the host stops it and what
    would hold it."""
    cfg = compose_config(overrides(1, 16, "vllm"))
    assert recommend(Request(cfg, shape, 1, 141)).mode == "param_optimizer_offload"
    rec = recommend(Request(cfg, shape, 1, 141, host_gb=128))
    assert rec.mode == "param_optimizer_offload", rec.reason
    assert re.search(r"host 87\.\d GB per node$", rec.reason), rec.reason
    with pytest.raises(ValueError) as refused:
        recommend(Request(cfg, shape, 1, 141, host_gb=80))
    message = str(refused.value)
    least = re.search(
        r"^no offload mode fits 80.0 GB of host memory per node: \d+ candidates fit 141.00 GB per device, "
        r"and the one needing the least host, (\S+) with micro-batch \d+, needs (\d+\.\d) GB per node .*; "
        r"a node with (\d+\.\d) GB of host memory would hold it",
        message,
    )
    assert least and least.group(1).startswith("param_optimizer_offload"), message
    need, node = float(least.group(2)), float(least.group(3))
    assert 0.9 * 80 < need and abs(node - need / 0.9) < 0.1
    rec = recommend(Request(cfg, shape, 1, 141, host_gb=node + 0.1))  # a node of that size
    assert rec.mode == "param_optimizer_offload", rec.reason


def test_nothing_fits_says_what_to_change(shape):
    cfg = compose_config(overrides(1, 16, "vllm"))
    with pytest.raises(ValueError, match="no offload mode fits 2.00 GB per device.*n_gpus_per_node"):
        recommend(Request(cfg, shape, 1, 2))


def test_rollout_auto_is_resolved_as_start_up_resolves_it(shape):
    """verl's default rollout.name=auto: the planner plans for the backend a run would use."""
    from verl_lite.rollout import resolve_rollout_name

    cfg = compose_config([f"actor_rollout_ref.model.path={SEVEN_B}", "algorithm.adv_estimator=grpo"])
    assert cfg.actor_rollout_ref.rollout.name == resolve_rollout_name("auto") != "auto"
    rows = plan_rows(Request(cfg, shape, 8, 80))
    assert rows and all("generate" in r.estimate.phases for r in rows)


def test_cli_takes_hydra_overrides_and_prints_the_table():
    cmd = [
        sys.executable,
        "-m",
        "verl_lite.planner",
        "--device-memory-gb",
        "24",
        *overrides(1, 16, "vllm", "actor_rollout_ref.rollout.gpu_memory_utilization=0.3"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "7.616B params" in out and "1 devices of 24.00 GB, host unchecked; planned for GPUs" in out
    for column in (
        "none",
        "param_optimizer_offload",
        "offload_policy",
        "generate",
        "update_actor",
        "host/node",
    ):
        assert column in out
    assert "recommendation: none, " in out
    assert "do not fit even at the smallest micro-batch; offload_policy with micro-batch" in out
    assert "actor_rollout_ref.actor.fsdp_config.offload_policy=True" in out


def test_cli_refuses_a_bad_key_and_a_critic_without_a_config_in_one_line(capsys):
    """The command line's refusals, through its main() in this process (the process itself is run
    by test_cli_takes_hydra_overrides_and_prints_the_table)."""
    argv = ["--device-memory-gb", "24", *overrides(1, 16, "vllm")]
    assert planner_main([*argv, "trainer.no_such_key=1"]) != 0
    assert "no_such_key" in capsys.readouterr().err
    no_critic = [*argv, "algorithm.adv_estimator=gae", "critic.model.path=/no/such/model"]
    assert planner_main(no_critic) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "python -m verl_lite.planner: critic.model.path='/no/such/model': no config.json to plan from; set "
        "critic.model.path to a HF model folder (the planner reads only its config.json)"
    ]


def half_b(*extra: str) -> list[str]:
    """0.5B with 2048-token responses beside vLLM at 0.3 of a 24 GB card."""
    base = overrides(1, 16, "vllm", "actor_rollout_ref.rollout.gpu_memory_utilization=0.3", *extra)
    return [o.replace(SEVEN_B, HALF_B) for o in base] + ["data.max_response_length=2048"]


def test_candidates_go_from_no_copies_to_copies_every_micro_batch():
    cfg = compose_config(half_b())
    assert candidates(cfg, LEVERS) == [
        ("none", ()),
        ("none", ("fused",)),
        ("param_optimizer_offload", ()),
        ("param_optimizer_offload", ("fused",)),
        ("none", ("fused", "activation_offload")),
        ("param_optimizer_offload", ("fused", "activation_offload")),
        ("offload_policy", ()),
        ("offload_policy", ("fused",)),
        ("offload_policy", ("fused", "activation_offload")),
    ]
    cfg.actor_rollout_ref.model.use_fused_kernels = True  # configured: on in every row, not proposed
    assert candidates(cfg, LEVERS)[:3] == [
        ("none", ()),
        ("param_optimizer_offload", ()),
        ("none", ("activation_offload",)),
    ]
    assert candidates(compose_config(half_b()), ("activation_offload",))[:3] == [
        ("none", ()),
        ("param_optimizer_offload", ()),
        ("none", ("activation_offload",)),
    ], "a lever the planner may not propose is left out, the others stay"


def test_fused_log_probs_are_recommended_before_any_offload():
    """The old-log-prob pass's fp32 logits copies (4 x 2048 responses x 152k vocab) do not fit beside
    vLLM; fused log-probs keep two chunks instead, and the overrides turn them on for actor and ref."""
    shape = read_shape(HALF_B)
    cfg = compose_config(half_b())
    rec = recommend(Request(cfg, shape, 1, 24, levers=LEVERS))
    assert (rec.mode, rec.levers) == ("none", ("fused",)) and rec.micro >= 8, rec.reason
    assert rec.reason.startswith("none does not fit even at the smallest micro-batch; none+fused")
    assert rec.overrides["model.use_fused_kernels"] is rec.overrides["actor.use_fused_kernels"] is True
    rows = plan_rows(Request(cfg, shape, 1, 24, levers=LEVERS))
    plain = [r for r in rows if r.mode == "none" and not r.levers]
    assert all(r.estimate.peak_phase in ("old_log_prob", "update_actor") for r in plain)


def test_nothing_fits_names_the_sequence_parallel_size_that_would():
    """32k-token responses on 16 GB with sdpa (its (S, S) block mask: a varlen kernel, verl's default
    flash_attention_2, would fit them): no mode or lever fits; sp=2 halves every per-token term (the
    planner does not apply it: it changes the data-parallel size)."""
    shape = read_shape(HALF_B)
    sdpa = "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"
    cfg = compose_config(half_b("trainer.n_gpus_per_node=8", sdpa))
    cfg.data.max_response_length = cfg.actor_rollout_ref.rollout.response_length = 32768
    with pytest.raises(ValueError) as err:
        recommend(Request(cfg, shape, 8, 16, levers=LEVERS))
    message = str(err.value)
    assert message.startswith("no offload mode fits 16.00 GB per device"), message
    assert re.search(r"ulysses_sequence_parallel_size=2 gives \d+\.\d\d GB \(.*: fits\)", message), message


@pytest.mark.parametrize("lever", LEVERS)
def test_the_planner_proposes_a_lever_only_when_the_config_accepts_its_keys(lever):
    key = {"fused": "use_fused_kernels", "activation_offload": "enable_activation_offload"}[lever]
    try:
        compose_config(half_b(f"actor_rollout_ref.model.{key}=True"))
        accepted = True
    except ConfigError:
        accepted = False
    assert (lever in proposable_levers()) is accepted


def test_the_trainer_keeps_a_colocated_critic_on_the_device_when_the_plan_fits():
    """auto_offload.idle_on_host (the trainer's start-up decision) for the actor as configured: 8 x 80 GB hold
    a 7B actor, 7B critic and 0.5B reward model resident; 8 x 56 GB do not, so they wait on the host."""
    from tests.planner.test_phases import COLOCATED, config
    from verl_lite.planner.auto_offload import idle_on_host

    cfg = config(*COLOCATED, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4")
    idle, message = idle_on_host(cfg, [80.0, 81.0], accelerator=True)
    assert not idle and "stay on the device between their phases" in message and "80.00 GB" in message
    idle, message = idle_on_host(cfg, [56.0], accelerator=True)
    assert idle and "wait in host memory between their phases" in message
    cfg.trainer.device_memory_gb = 80.0  # the key wins over what the workers report
    assert idle_on_host(cfg, [56.0], accelerator=True)[0] is False


@pytest.mark.parametrize(
    "flag, value", [("--device-memory-gb", "nan"), ("--device-memory-gb", "-8"), ("--host-memory-gb", "inf")]
)
def test_cli_refuses_a_memory_that_is_not_a_finite_positive_number(flag, value, capsys):
    """nan passed every comparison (nothing fits, or everything), a negative budget planned nothing:
    one line naming the flag, exit 2, before any config is composed (in-process: the entry's main)."""
    assert planner_main([flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"python -m verl_lite.planner: {flag}={float(value):g} must be a finite number of GB > 0 (e.g. 24)"
    ), err

"""Start-up (verl_lite/preflight.py): the config composed through Hydra, resolved and checked by every
component's registered step; the messages name the key, the value and the fix."""

import pytest
from hydra.errors import ConfigCompositionException

from verl_lite.config.compose import load_config
from verl_lite.config.errors import ConfigError
from verl_lite.config.overrides import OverrideError
from verl_lite.preflight import prepare

ARR = "actor_rollout_ref"


def load(*overrides):
    """The demo config (the tiny run) with `overrides`."""
    return load_config(overrides, "demo")


def normalize(cfg) -> list[str]:
    """Start-up on a CPU machine; [] when it passes."""
    try:
        prepare(cfg, num_gpus=0)
    except ConfigError as e:
        return e.problems
    return []


def problems(cfg, tmp_path=None):
    with pytest.raises(ConfigError) as info:
        prepare(cfg, num_gpus=0)
    return "\n".join(info.value.problems)


def test_defaults_compose_into_the_typed_schema():
    cfg = load()
    assert cfg.algorithm.adv_estimator == "grpo"
    assert cfg.actor_rollout_ref.actor.fsdp_config.param_offload is False
    assert cfg.trainer.default_local_dir == "checkpoints/verl_lite/tiny_arith_grpo"  # interpolation resolved
    assert cfg.trainer.logger == ["console", "file"]


def test_overrides_are_type_checked_and_unknown_keys_rejected():
    cfg = load("actor_rollout_ref.actor.optim.lr=3e-5", "trainer.logger=[console]")
    assert cfg.actor_rollout_ref.actor.optim.lr == 3e-5 and cfg.trainer.logger == ["console"]
    with pytest.raises(OverrideError, match="actor_rollout_ref.actor.no_such_key is not a key"):
        load("actor_rollout_ref.actor.no_such_key=1")
    with pytest.raises(ConfigCompositionException, match="ppo_epochs"):
        load("actor_rollout_ref.actor.ppo_epochs=many")


def test_normalize_fills_verls_derived_values():
    cfg = load(
        "actor_rollout_ref.actor.clip_ratio=0.3",
        "actor_rollout_ref.actor.clip_ratio_low=null",  # verl: a null bound is clip_ratio
        "actor_rollout_ref.actor.clip_ratio_high=0.4",
        "actor_rollout_ref.actor.ppo_micro_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null",
    )
    assert normalize(cfg) == []
    a = cfg.actor_rollout_ref.actor
    assert (a.clip_ratio_low, a.clip_ratio_high) == (0.3, 0.4)
    assert a.ppo_micro_batch_size_per_gpu == 4  # global 8 over 2 workers
    assert cfg.actor_rollout_ref.rollout.response_length == cfg.data.max_response_length


def test_batch_geometry_messages_name_keys_and_numbers():
    msg = problems(
        load(
            "actor_rollout_ref.rollout.n=3",
            "actor_rollout_ref.actor.ppo_mini_batch_size=16",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=5",
        )
    )
    assert "ppo_micro_batch_size_per_gpu=5 does not divide the per-worker mini-batch of 24" in msg
    msg = problems(
        load("trainer.n_gpus_per_node=3", "actor_rollout_ref.rollout.n=5", "ray_kwargs.ray_init.num_cpus=3")
    )
    assert "data.train_batch_size=32 prompts cannot be split over 3 workers" in msg
    assert "16 x 5 = 80 responses cannot be split over 3 workers" in msg
    msg = problems(load("data.train_batch_size=24"))
    assert (
        "data.train_batch_size=24 is not a multiple of actor_rollout_ref.actor.ppo_mini_batch_size=16" in msg
    )


def test_value_and_choice_problems_are_collected_together(tmp_path):
    msg = problems(
        load(
            "actor_rollout_ref.rollout.n=1",
            "algorithm.adv_estimator=grpo_passk",
            "actor_rollout_ref.actor.loss_agg_mode=token-avg",
            f"data.train_files={tmp_path}/missing.parquet",
            "actor_rollout_ref.model.path=/nonexistent",
        )
    )
    assert "algorithm.adv_estimator=grpo_passk needs actor_rollout_ref.rollout.n >= 2" in msg
    assert "loss_agg_mode='token-avg' is not one of" in msg
    assert f"data.train_files: '{tmp_path}/missing.parquet' does not exist" in msg
    assert "actor_rollout_ref.model.path='/nonexistent': no such folder" in msg


def test_deprecated_and_new_micro_size_together_is_an_error():
    msg = problems(load("actor_rollout_ref.actor.ppo_micro_batch_size=8"))
    assert "ppo_micro_batch_size and actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu are both set" in msg


def test_clip_bounds_are_verls_whatever_the_loss_mode():
    """verl's bounds default to 0.2 (not null): clip_ratio alone moves nothing, for gspo too."""
    cfg = load("actor_rollout_ref.actor.policy_loss.loss_mode=gspo", "actor_rollout_ref.actor.clip_ratio=0.1")
    assert normalize(cfg) == []
    a = cfg.actor_rollout_ref.actor
    assert (a.clip_ratio_low, a.clip_ratio_high) == (0.2, 0.2)
    cfg = load(
        "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
        "actor_rollout_ref.actor.clip_ratio_low=3e-4",
        "actor_rollout_ref.actor.clip_ratio_high=4e-4",
    )
    assert normalize(cfg) == []
    assert (cfg.actor_rollout_ref.actor.clip_ratio_low, cfg.actor_rollout_ref.actor.clip_ratio_high) == (
        3e-4,
        4e-4,
    )


def test_dual_clip_cap_and_kl_type_are_checked():
    kl_type = "actor_rollout_ref.actor.kl_loss_type=k3++"
    msg = problems(
        load("actor_rollout_ref.actor.clip_ratio_c=1.0", kl_type, "actor_rollout_ref.actor.use_kl_loss=True")
    )
    assert "actor_rollout_ref.actor.clip_ratio_c=1.0 must be > 1" in msg
    assert "actor_rollout_ref.actor.kl_loss_type='k3++'" in msg
    # read only with the KL loss on, as in verl (its scripts set KL options with USE_KL=False)
    assert "kl_loss_type" not in problems(load("actor_rollout_ref.actor.clip_ratio_c=1.0", kl_type))
    assert "kl_penalty" not in problems(
        load("algorithm.kl_penalty=nope", "actor_rollout_ref.actor.clip_ratio_c=1.0")
    )


def test_rollout_name_auto_is_vllm_where_installed():
    from verl_lite.rollout import vllm_available

    cfg = load()
    assert cfg.actor_rollout_ref.rollout.name == "auto"
    assert normalize(cfg) == []
    assert cfg.actor_rollout_ref.rollout.name == ("vllm" if vllm_available() else "hf")
    assert load("actor_rollout_ref.rollout.name=hf").actor_rollout_ref.rollout.name == "hf"


def test_vllm_engine_keys_are_checked():
    from verl_lite.rollout import vllm_available

    msg = problems(
        load(
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=3",
            "trainer.n_gpus_per_node=2",
            "actor_rollout_ref.rollout.max_model_len=10",
        )
    )
    assert "rollout.tensor_model_parallel_size=3 must divide the 2 workers" in msg
    assert "rollout.max_model_len=10 is below prompt_length + response_length = 24" in msg
    # one value out of its domain is config/domains.py's, reported before anything is derived
    msg = problems(
        load("actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.gpu_memory_utilization=1.5")
    )
    assert msg == "actor_rollout_ref.rollout.gpu_memory_utilization=1.5 must be a number in (0, 1]"
    assert ("vLLM is not installed" in msg) == (not vllm_available())
    msg = problems(
        load(
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.enable_chunked_prefill=False",
            "actor_rollout_ref.rollout.max_num_batched_tokens=16",
        )
    )
    assert "max_num_batched_tokens=16 is below max_model_len=24" in msg
    tp2 = ("actor_rollout_ref.rollout.tensor_model_parallel_size=2", "trainer.n_gpus_per_node=2")
    assert "tensor_model_parallel_size" not in "\n".join(
        normalize(load("actor_rollout_ref.rollout.name=vllm", *tp2))
    )
    cfg = load(
        "actor_rollout_ref.rollout.name=hf", *tp2
    )  # verl's TP=2 does not apply to hf: said, not refused
    assert normalize(cfg) == []
    sglang = "rollout.name=sglang is not supported by verl_lite: use vllm, hf (or auto)"
    assert sglang in problems(load("actor_rollout_ref.rollout.name=sglang"))  # verl's backend, said so
    assert "rollout.name='vlm' is not one of" in problems(load("actor_rollout_ref.rollout.name=vlm"))


def test_checkpoint_keys_are_validated():
    cfg = load(
        "trainer.resume_mode=sometimes",
        "trainer.save_freq=2",
        "actor_rollout_ref.actor.checkpoint.save_contents=[optimizer,weights]",
    )
    found = problems(cfg)
    assert "trainer.resume_mode='sometimes' is not one of" in found
    assert "trainer.max_actor_ckpt_to_keep=0 must be a positive integer" in problems(
        load("trainer.max_actor_ckpt_to_keep=0")
    )
    assert "checkpoint.save_contents: ['weights'] not among" in found
    # verl's HF-export-only checkpoints (save_contents=['hf_model']) are accepted; a resume from one is
    # refused when found (tests/trainer/test_checkpoint.py)
    assert normalize(load("trainer.save_freq=2", f"{ARR}.actor.checkpoint.save_contents=[hf_model]")) == []
    assert "trainer.resume_from_path" in problems(load("trainer.resume_mode=resume_path"))
    cfg = load("actor_rollout_ref.actor.checkpoint.save_contents=[model,hf_model]")
    normalize(cfg)
    assert cfg.actor_rollout_ref.actor.checkpoint.load_contents == ["model", "hf_model"]


def test_critic_keys_default_to_the_actors_and_are_checked_like_the_actors():
    cfg = load("algorithm.adv_estimator=gae", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8")
    assert normalize(cfg) == []
    c, a = cfg.critic, cfg.actor_rollout_ref.actor
    assert c.model.path == cfg.actor_rollout_ref.model.path
    assert (c.ppo_mini_batch_size, c.ppo_epochs, c.loss_agg_mode) == (
        a.ppo_mini_batch_size,
        a.ppo_epochs,
        a.loss_agg_mode,
    )
    assert c.ppo_micro_batch_size_per_gpu == c.forward_micro_batch_size_per_gpu == 8
    msg = problems(
        load(
            "algorithm.adv_estimator=gae",
            "critic.ppo_mini_batch_size=8",
            "critic.ppo_micro_batch_size_per_gpu=5",
        )
    )
    assert (
        "critic.ppo_micro_batch_size_per_gpu=5 does not divide the per-worker critic mini-batch of 32" in msg
    )
    msg = problems(load("algorithm.adv_estimator=gae", "critic.cliprange_value=0"))
    assert "critic.cliprange_value=0.0 must be a finite number > 0" in msg
    msg = problems(load("algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=5"))
    assert "data.train_batch_size=32 is not a multiple of critic.ppo_mini_batch_size=5" in msg
    msg = problems(load("algorithm.adv_estimator=gae", "critic.model.path=/no/such/critic"))
    assert "critic.model.path='/no/such/critic'" in msg


def test_algorithm_keys_are_checked_with_their_names():
    msg = problems(
        load(
            "algorithm.use_kl_in_reward=True",
            "algorithm.kl_penalty=nope",
            "algorithm.kl_ctrl.type=pid",
            "algorithm.filter_groups.enable=True",
        )
    )
    assert "algorithm.kl_penalty='nope'" in msg
    assert "algorithm.kl_ctrl.type='pid' is not one of ['fixed', 'adaptive']" in msg
    assert "algorithm.lam=1.5 must be a number in [0, 1]" in problems(load("algorithm.lam=1.5"))
    assert "filter_groups" not in msg  # verl 0.9.1's default metric: reward
    msg = problems(load("algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=null"))
    assert "algorithm.filter_groups.metric=null must be a metric name: reward, seq_reward" in msg
    adaptive = ("algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.target_kl=0")
    msg = problems(load(*adaptive, "algorithm.use_kl_in_reward=True"))
    assert "algorithm.kl_ctrl.type=adaptive needs algorithm.kl_ctrl.target_kl > 0" in msg
    assert "kl_ctrl" not in problems(load(*adaptive, "algorithm.lam=1.5"))  # read only with the KL penalty


def test_reward_model_needs_a_path_and_the_actors_tokenizer():
    msg = problems(load("reward_model.enable=True", "reward_model.model.path=null"))
    # null is verl 0.9's default: the problem is that the reward model is asked for without one
    assert "reward_model.enable=True but reward_model.model.path is not set" in msg
    msg = problems(load("reward_model.enable=True", "reward_model.model.path=/x"))
    assert "reward_model.model.path='/x': no such folder" in msg
    with pytest.raises(
        ConfigError, match="reward_model.model.input_tokenizer=/t is not supported by verl_lite"
    ):
        load(
            "reward_model.enable=True",
            "reward_model.use_reward_loop=False",
            "reward_model.model.input_tokenizer=/t",
        )


def test_critic_and_reward_model_must_share_the_actors_vocabulary(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForSequenceClassification

    shape = dict(hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2)
    for name, vocab, cls in (  # tiny models whose weights fit their configs
        ("actor", 115, Qwen2ForCausalLM),
        ("critic", 50, Qwen2ForCausalLM),
        ("rm", 50, Qwen2ForSequenceClassification),
    ):
        cls(Qwen2Config(vocab_size=vocab, num_key_value_heads=1, num_labels=1, **shape)).save_pretrained(
            tmp_path / name
        )
    actor = f"actor_rollout_ref.model.path={tmp_path / 'actor'}"
    msg = problems(
        load(
            "algorithm.adv_estimator=gae",
            actor,
            f"critic.model.path={tmp_path / 'critic'}",
            "critic.model.tokenizer_path=/other/tokenizer",
        )
    )
    assert "critic.model.path=" in msg and "has vocab_size=50 but the actor" in msg
    assert "critic.model.tokenizer_path='/other/tokenizer'" in msg
    msg = problems(load(actor, "reward_model.enable=True", f"reward_model.model.path={tmp_path / 'rm'}"))
    assert "reward_model.model.path=" in msg and "has vocab_size=50 but the actor" in msg
    msg = problems(load(actor, "reward_model.enable=True", f"reward_model.model.path={tmp_path / 'critic'}"))
    assert "has no trained score head (score.weight)" in msg  # a causal LM is no reward model


def test_verls_renamed_keys_set_what_they_name():
    """verl's old and new spellings of the same setting: either one works."""
    arr = "actor_rollout_ref"
    cfg = load(f"{arr}.actor.optim.clip_grad=0.5", "critic.optim.clip_grad=0.25", f"{arr}.nccl_timeout=123")
    assert cfg.actor_rollout_ref.actor.grad_clip == 0.5 and cfg.critic.grad_clip == 0.25
    assert cfg.trainer.dist_timeout_s == 123
    cfg = load(f"{arr}.actor.grad_clip=0.3")  # verl's legacy-worker name, as before
    assert cfg.actor_rollout_ref.actor.grad_clip == 0.3
    cfg = load(
        f"{arr}.actor.optim.warmup_style=cosine",
        f"{arr}.rollout.checkpoint_engine.update_weights_bucket_megabytes=64",
    )
    prepare(cfg, num_gpus=0)
    assert cfg.actor_rollout_ref.actor.optim.lr_scheduler_type == "cosine"
    assert cfg.actor_rollout_ref.rollout.update_weights_bucket_megabytes == 64
    cfg = load_config([f"{arr}.actor.fsdp_config.dtype=float32"])  # verl's config: bf16 unless dtype says
    assert cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype == "float32"
    assert load_config().actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype == "bfloat16"
    assert load("reward_model.reward_manager=dapo").reward_manager.name == "dapo"


def test_critic_enable_overrides_the_estimators_choice():
    from verl_lite.roles import uses_critic

    assert uses_critic(load_config([]))  # verl's default estimator is gae
    assert not uses_critic(load_config(["critic.enable=False"]))
    assert uses_critic(load("algorithm.adv_estimator=grpo", "critic.enable=True"))
    assert not uses_critic(load("algorithm.adv_estimator=grpo"))


def test_gen_batch_size_may_differ_only_for_dapos_dynamic_sampling():
    msg = problems(load("data.gen_batch_size=48"))
    assert "data.gen_batch_size=48 differs from data.train_batch_size=32: only DAPO's dynamic sampling" in msg
    dapo = ("algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=seq_reward")
    assert normalize(load("data.gen_batch_size=48", *dapo)) == []
    assert "data.gen_batch_size=47 prompts cannot be split over 2 workers" in problems(
        load("data.gen_batch_size=47", *dapo)
    )


def test_every_registered_step_lives_next_to_its_component():
    """preflight.py only registers: each step is a function of a component's module, returning lines;
    the checks live in its checks (or the config's validate / domains / values) modules."""
    from verl_lite import preflight

    for phase in (
        preflight.VALUES,
        preflight.CHECKS,
        preflight.TOKENIZER,
        preflight.DATASETS,
        preflight.CLUSTER,
    ):
        for step in phase:
            module = step.fn.__module__
            assert module.startswith("verl_lite.") and not module.startswith("verl_lite.preflight"), step.name
            assert module.endswith(("checks", ".validate", ".domains", ".values")), f"{step.name}: {module}"
    for phase in preflight.RESOLVE_PHASES:
        for step in phase:
            assert not step.fn.__module__.startswith("verl_lite.preflight"), step.name


def test_the_reference_sizes_are_needed_only_when_a_kl_term_builds_the_reference():
    """verl builds the reference policy only for use_kl_loss or use_kl_in_reward; without either, its
    micro-batch size is never read (verl's PPO examples leave it unset)."""
    no_ref = f"{ARR}.ref.log_prob_micro_batch_size_per_gpu=null"
    assert normalize(load(no_ref, f"{ARR}.actor.use_kl_loss=False", "algorithm.use_kl_in_reward=False")) == []
    missing = f"{ARR}.ref.log_prob_micro_batch_size_per_gpu is not set"
    assert missing in problems(load(no_ref, f"{ARR}.actor.use_kl_loss=True"))
    assert missing in problems(load(no_ref, "algorithm.use_kl_in_reward=True"))


def test_a_lower_clip_bound_of_one_or_more_is_verls_no_lower_bound():
    """verl's CISPO scripts set clip_ratio_low=10: the ratio's lower clip 1 - 10 never binds. Accepted, as
    in verl; a bound must still be > 0."""
    cispo = (f"{ARR}.actor.policy_loss.loss_mode=cispo", f"{ARR}.actor.clip_ratio_low=10")
    assert normalize(load(*cispo)) == []
    assert f"{ARR}.actor.clip_ratio_low=0.0 must be" in problems(load(f"{ARR}.actor.clip_ratio_low=0"))


def test_a_refused_value_is_found_before_the_components_are_imported():
    """check_early (placeholder paths, value domains) imports no component: main_ppo imports and runs
    it before torch, transformers and Ray, so a bad value is reported in about a second."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from verl_lite import main_ppo, preflight_early\n"
        "from verl_lite.config.compose import load_config\n"
        "cfg = load_config(['actor_rollout_ref.rollout.response_length=-1'], 'demo')\n"
        "try:\n"
        "    preflight_early.check_early(cfg)\n"
        "except ValueError as e:\n"
        "    print(e)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'ray') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "response_length=-1 must be a positive integer" in out and out.strip().endswith("[]"), out


MICRO_4 = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"
GROUP_ESTIMATORS = [
    "grpo",
    "grpo_vectorized",
    "gpg",
    "rloo",
    "rloo_vectorized",
    "opo",
    "reinforce_plus_plus_baseline",
]


@pytest.mark.parametrize("estimator", GROUP_ESTIMATORS)
def test_group_estimators_run_with_one_response_per_prompt_as_in_verl(estimator, caplog):
    """verl's main CI script with ADV_ESTIMATOR=grpo leaves rollout.n at verl's 1 (run_function_reward.sh):
    a group of one gets mean 0 and std 1 there (tests/algos/test_advantages.py), and the run says so once."""
    import logging

    with caplog.at_level(logging.WARNING, logger="verl_lite.algos"):
        cfg = load(f"algorithm.adv_estimator={estimator}", "actor_rollout_ref.rollout.n=1", MICRO_4)
        assert normalize(cfg) == []
    (line,) = [r.getMessage() for r in caplog.records if "rollout.n=1" in r.getMessage()]
    assert f"algorithm.adv_estimator={estimator} with actor_rollout_ref.rollout.n=1" in line


def test_verls_loss_agg_token_sum_is_accepted():
    assert normalize(load("actor_rollout_ref.actor.loss_agg_mode=token-sum")) == []


def test_dynamic_sampling_with_one_response_per_prompt_runs_as_in_verl(caplog):
    """docs/algo/dapo.md's filter_groups YAML block leaves rollout.n at verl's 1: verl's DAPO trainer keeps
    a group of one (tests/trainer/test_dynamic_sampling.py), so nothing is filtered; the run says so once."""
    import logging

    dapo = ("algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=acc")
    with caplog.at_level(logging.WARNING, logger="verl_lite.algos"):
        assert normalize(load(*dapo, "actor_rollout_ref.rollout.n=1", MICRO_4)) == []
    (line,) = [r.getMessage() for r in caplog.records if "filter_groups" in r.getMessage()]
    assert "rollout.n=1: a group of one response is always kept" in line


def test_auto_offload_is_decided_before_the_checks_and_the_freeze(monkeypatch):
    """preflight.finalize, once the devices are probed: trainer.auto_offload's choice is set (the
    resolve step), the checks run on it, then the config is frozen; without a change, no second run."""
    from verl_lite import preflight
    from verl_lite.config.freeze import is_frozen
    from verl_lite.engine.model_shape import read_shape
    from verl_lite.planner.recommend import plan_rows, recommend
    from verl_lite.planner.request import HEADROOM, Request
    from verl_lite.preflight_early import Step

    seen = []

    def spy(cfg, run):  # a check that records the values it is given
        seen.append((cfg.actor_rollout_ref.actor.fsdp_config.offload_policy, is_frozen(cfg)))
        return []

    monkeypatch.setattr(preflight, "CHECKS", [*preflight.CHECKS, Step("spy", spy)])
    cfg = load("trainer.auto_offload=True", f"{ARR}.rollout.name=hf")  # hf: no vLLM reservation
    run = prepare(cfg, num_gpus=0)
    shape = read_shape(cfg.actor_rollout_ref.model.path)
    rows = plan_rows(Request(cfg, shape, run.world, 1.0, accelerator=False))
    no_policy = min(r.estimate.peak for r in rows if r.mode != "offload_policy")
    cfg.trainer.device_memory_gb = 0.99 * no_policy / HEADROOM / 1024**3  # only offload_policy fits
    budget = cfg.trainer.device_memory_gb
    assert recommend(Request(cfg, shape, run.world, budget, accelerator=False)).mode == "offload_policy"
    assert seen == [(False, False)]  # prepare's checks: the configured value
    preflight.finalize(cfg, run, [])
    assert seen[1:] == [(True, False)], "the checks run on the planner's choice, before the freeze"
    assert is_frozen(cfg) and cfg.actor_rollout_ref.actor.fsdp_config.offload_policy is True
    cfg = load()  # trainer.auto_offload=False: the checks have already seen the final values
    run = prepare(cfg, num_gpus=0)
    seen.clear()
    preflight.finalize(cfg, run, [])
    assert seen == [] and is_frozen(cfg)


COLOCATE = ("trainer.v1.trainer_mode=colocate_async",)


@pytest.mark.parametrize(
    "overrides, said",
    [
        (("algorithm.adv_estimator=remax",), "with algorithm.adv_estimator=remax: its greedy baseline"),
        (  # the filter scores between rounds while the rollout holds the devices the model shares
            ("algorithm.filter_groups.enable=True", "reward_model.enable=True"),
            "with algorithm.filter_groups.enable=True and a reward model (reward_model.enable)",
        ),
        (  # a TP group's ranks would have to end each round together
            (
                f"{ARR}.rollout.agent.default_agent_loop=tool_agent",
                f"{ARR}.rollout.name=vllm",
                f"{ARR}.rollout.tensor_model_parallel_size=2",
            ),
            "with agent loops (rollout.agent.default_agent_loop) on a tensor-parallel engine",
        ),
        (
            ("trainer.v1.sampler.max_off_policy_threshold=0",),
            "max_off_policy_threshold=0 must be a positive integer",
        ),
        (
            ("trainer.v1.sampler.max_off_policy_strategy=keep",),
            "max_off_policy_strategy='keep' is not one of",
        ),
        (
            ("trainer.v1.colocate_async.num_warmup_batches=-1",),
            "num_warmup_batches=-1 must be an integer >= 0",
        ),
    ],
)
def test_what_colocate_async_does_not_serve_is_refused_at_start_up_naming_the_key(overrides, said):
    msg = problems(load(*COLOCATE, *overrides))
    assert said in msg, msg
    # the same values under the sync trainer (or verl's legacy one, which ignores trainer.v1) are not its problems
    assert "colocate_async" not in "\n".join(normalize(load("trainer.use_v1=False", *COLOCATE, *overrides)))


def test_dapo_and_agent_loops_start_under_the_async_modes():
    """DAPO's filter evicts and refills groups in the replay buffer (trainer/colocate_async.py); agent
    loops run in rounds (agent_loop/rounds.py)."""
    for mode in (COLOCATE, SEPARATE):
        assert normalize(load(*mode, "algorithm.filter_groups.enable=True")) == []
        assert normalize(load(*mode, f"{ARR}.rollout.agent.default_agent_loop=tool_agent")) == []


SEPARATE = (
    "trainer.v1.trainer_mode=separate_async",
    f"{ARR}.rollout.nnodes=1",
    f"{ARR}.rollout.n_gpus_per_node=1",
    "trainer.v1.separate_async.parameter_sync_step=2",  # the demo: 32 prompts, mini-batches of 16
)


@pytest.mark.parametrize(
    "overrides, said",
    [
        (
            ("trainer.v1.separate_async.parameter_sync_step=4",),
            "data.train_batch_size=32 must equal trainer.v1.separate_async.parameter_sync_step=4 x "
            "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        ),
        ((f"{ARR}.rollout.nnodes=0",), "rollout.nnodes=0: the rollout group has no devices"),
        (
            (f"{ARR}.rollout.n_gpus_per_node=0",),
            "rollout.n_gpus_per_node=0: the rollout group has no devices",
        ),
        (("algorithm.adv_estimator=gae",), "with a critic (algorithm.adv_estimator=gae)"),
        (
            ("algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.type=adaptive"),
            "kl_ctrl.type=adaptive: verl moves the KL coefficient",
        ),
        (("algorithm.adv_estimator=remax",), "separate_async with algorithm.adv_estimator=remax"),
        (("trainer.v1.separate_async.parameter_sync_step=0",), "parameter_sync_step=0 must be a positive"),
        (  # the engines live in the rollout group: its size, not the trainer's, bounds the TP size
            (
                f"{ARR}.rollout.name=vllm",
                f"{ARR}.rollout.tensor_model_parallel_size=2",
                "trainer.n_gpus_per_node=2",
            ),
            "tensor_model_parallel_size=2 must divide the 1 workers (actor_rollout_ref.rollout.nnodes x "
            "actor_rollout_ref.rollout.n_gpus_per_node)",
        ),
    ],
)
def test_what_separate_async_cannot_serve_is_refused_at_start_up_naming_the_keys(overrides, said):
    assert normalize(load(*SEPARATE)) == []
    msg = problems(load(*SEPARATE, *overrides))
    assert said in msg, msg


def test_separate_async_sizes_the_rollout_s_tp_by_its_own_group():
    tp2 = (f"{ARR}.rollout.name=vllm", f"{ARR}.rollout.tensor_model_parallel_size=2")
    assert (
        normalize(load(*SEPARATE, *tp2, "trainer.n_gpus_per_node=1", f"{ARR}.rollout.n_gpus_per_node=2"))
        == []
    )


def test_separate_async_refuses_a_rollout_group_the_node_has_no_gpus_for():
    cfg = load(*SEPARATE, "trainer.n_gpus_per_node=2", "trainer.device=cuda")
    with pytest.raises(ConfigError) as info:
        prepare(cfg, num_gpus=2)
    said = "\n".join(info.value.problems)
    assert (
        "trainer.n_gpus_per_node=2 + actor_rollout_ref.rollout.n_gpus_per_node=1 GPUs on one node, which "
        in said
    )
    assert "has 2: no devices are left for the rollout group" in said


def _agent_rows(path: str, names: list[str]) -> str:
    import pandas as pd

    rows = [
        {
            "data_source": "verl_lite/arith",
            "prompt": [{"role": "user", "content": "1+1"}],
            "reward_model": {"ground_truth": "2"},
            "extra_info": {"index": i},
            "agent_name": name,
        }
        for i, name in enumerate(names)
    ]
    pd.DataFrame(rows).to_parquet(path)
    return path


def test_the_async_modes_take_rows_that_name_agent_loops(tmp_path):
    """Multi-turn rows run in rounds (agent_loop/rounds.py), training and validation alike (under
    separate_async the rollout group validates through the agent loops too)."""
    from verl_lite.main_ppo import load_inputs

    path = _agent_rows(str(tmp_path / "rows.parquet"), ["single_turn_agent"] + ["tool_agent"] * 33)
    for mode in (COLOCATE, SEPARATE):
        load_inputs(load(*mode, f"data.train_files={path}", f"data.val_files={path}"))


def test_the_async_modes_refuse_agent_loop_rows_on_a_tensor_parallel_engine(tmp_path):
    from verl_lite.main_ppo import SetupError, load_inputs

    # a whole batch of the demo's 32 prompts
    path = _agent_rows(str(tmp_path / "rows.parquet"), ["single_turn_agent"] + ["tool_agent"] * 33)
    tp2 = (f"{ARR}.rollout.name=vllm", f"{ARR}.rollout.tensor_model_parallel_size=2")
    with pytest.raises(SetupError) as info:
        load_inputs(load(*COLOCATE, *tp2, f"data.train_files={path}", f"data.val_files={path}"))
    said = str(info.value)
    assert f"with agent loops ({path} row 1: 'tool_agent') on a tensor-parallel engine" in said, said
    assert "tensor_model_parallel_size=1 or trainer.v1.trainer_mode=sync" in said

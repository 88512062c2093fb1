"""Every key of verl's config is accepted by name; verl_lite's support table (config/support.py) accepts
the values that change nothing and refuses the others with one line; unknown keys are named."""

import logging

import pytest

from tests.config.verl_facts import MISSING, VERL_DEFAULTS, Link
from verl_lite.config import keys, support
from verl_lite.config.compose import compose_config, load_config
from verl_lite.config.errors import ConfigError
from verl_lite.config.overrides import OverrideError, normalize_argv

ARR = "actor_rollout_ref"


def _hydra_value(value) -> str:
    """verl's default as a Hydra override value (strings quoted: some hold commas)."""
    if isinstance(value, Link):
        return "${" + value.key + "}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def _verl_overrides(prefix: str = "") -> list[str]:
    """Every verl key set to verl's own default, as a verl launch script would write it."""
    out = []
    for key, value in VERL_DEFAULTS.items():
        if value == MISSING or (isinstance(value, dict) and value):
            continue  # verl's mandatory rollout.name; dicts with content are set key by key
        out.append(f"{prefix}{key}={_hydra_value(value)}")
    return out


@pytest.mark.parametrize("prefix", ["", "+", "++"], ids=["plain", "plus", "plus_plus"])
def test_every_verl_key_composes_by_name_at_verls_default(prefix):
    """No `not in struct`: all of verl's keys in one command line, with verl's '+' spellings too."""
    overrides = _verl_overrides(prefix)
    assert len(overrides) > 490
    cfg = load_config(overrides, "demo")
    assert (
        cfg.actor_rollout_ref.rollout.n == 1 and cfg.data.train_batch_size == 1024
    )  # verl's, not the demo's
    assert cfg.actor_rollout_ref.rollout.prompt_length == cfg.data.max_prompt_length == 512


def test_plus_spellings_of_keys_that_exist_here_set_them():
    cfg = load_config(
        [
            f"+{ARR}.actor.fsdp_config.mixed_precision.param_dtype=bf16",
            f"++{ARR}.actor.fsdp_config.mixed_precision.reduce_dtype=bf16",
            "+trainer.val_only=True",
        ],
        "demo",
    )
    mp = cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision
    assert (mp.param_dtype, mp.reduce_dtype, cfg.trainer.val_only) == ("bf16", "bf16", True)


@pytest.mark.parametrize(
    "line, near",
    [
        ("+trainer.val_onyl=True", "trainer.val_only"),
        (
            "++actor_rollout_ref.actor.ppo_micro_batch_sizes_per_gpu=4",
            f"{ARR}.actor.ppo_micro_batch_size_per_gpu",
        ),
        ("actor_rollout_ref.acter.ppo_epochs=2", "actor_rollout_ref.actor.ppo_epochs"),
        ("+trainer.no_such_key=1", None),
    ],
)
def test_a_key_the_schema_lacks_is_named_with_the_nearest_key(line, near):
    key = line.lstrip("+").split("=")[0]
    with pytest.raises(OverrideError) as info:
        compose_config([line], "demo")
    message = str(info.value)
    assert f"{key} is not a key of verl_lite's config" in message
    assert (f"did you mean {near}" in message) if near else ("did you mean" not in message)
    assert "\n" not in message


def test_keys_under_dict_fields_are_the_users():
    cfg = load_config(
        [
            f"+{ARR}.model.override_config.rope_theta=10000",
            "+reward_model.reward_kwargs.max_resp_len=8",
            "+ray_kwargs.ray_init.runtime_env.env_vars.FOO=bar",
            "+data.apply_chat_template_kwargs.enable_thinking=false",
            f"+{ARR}.rollout.engine_kwargs.vllm.swap_space=0",
        ],
        "demo",
    )
    assert cfg.actor_rollout_ref.model.override_config == {"rope_theta": 10000}
    assert cfg.ray_kwargs.ray_init.runtime_env == {"py_executable": None, "env_vars": {"FOO": "bar"}}
    assert cfg.data.apply_chat_template_kwargs == {"enable_thinking": False}
    assert cfg.actor_rollout_ref.rollout.engine_kwargs.vllm == {"swap_space": 0}


def test_argv_normalization_keeps_flags_and_handles_sweeps():
    argv = ["--config-name", "demo", "-m", f"+{ARR}.actor.optim.lr=1e-4,3e-4", "hydra/launcher=slurm"]
    assert normalize_argv(argv) == [
        "--config-name",
        "demo",
        "-m",
        f"{ARR}.actor.optim.lr=1e-4,3e-4",
        argv[-1],
    ]
    with pytest.raises(OverrideError, match="did you mean trainer.val_only"):
        normalize_argv(["-m", "+trainer.val_onyl=True,False"])


def test_every_refused_override_of_a_command_is_named_in_one_line():
    argv = [
        "trainer.total_epochs=2",
        "+trainer.val_onyl=True",
        "critic.fsdp.param_ofload=True",
        "data.no_such=1",
    ]
    with pytest.raises(OverrideError) as info:
        normalize_argv(argv)
    message = str(info.value)
    assert message.startswith("3 overrides are refused: ") and "\n" not in message
    for key in ("trainer.val_onyl", "critic.fsdp.param_ofload", "data.no_such"):
        assert f"{key} is not a key of verl_lite's config" in message
    assert "did you mean trainer.val_only" in message
    with pytest.raises(OverrideError) as info:  # the composed path (compose_config) says the same
        compose_config(argv, "demo")
    assert str(info.value) == message


# verl's memory features and other refused values: one line each, naming key, value and what to use
REFUSED = [
    (
        "critic.model.tiled_mlp.enabled=True",
        "verl 0.9's tiled MLP (use gradient checkpointing) is not in verl_lite",
    ),
    (f"{ARR}.rollout.skip_rollout=True", "every step generates"),
    (f"{ARR}.rollout.multi_turn.use_inference_chat_template=True", "token-in / token-out"),
    (f"{ARR}.actor.strategy=megatron", "FSDP1 and Megatron"),
    ("algorithm.use_pf_ppo=True", "policy-filtered PPO"),
    (f"{ARR}.actor.rollout_n=3", f"{ARR}.rollout.n"),
    # verl 0.9's default (V1) worker shuffles the mini-batches; verl_lite's are in order
    (f"{ARR}.actor.shuffle=True", "mini-batches are taken in order"),
    ("critic.shuffle=True", "leave it False"),
]


@pytest.mark.parametrize("line, instead", REFUSED, ids=[line.split("=")[0] for line, _ in REFUSED])
def test_a_refused_value_is_one_line_naming_key_value_and_instead(line, instead):
    key, value = line.split("=")
    with pytest.raises(ConfigError) as info:
        load_config([line], "demo")
    (problem,) = info.value.problems
    assert problem.startswith(f"{key}={value} is not supported by verl_lite: ") and instead in problem


def test_values_that_change_nothing_are_accepted_and_said_at_most_once(caplog):
    with caplog.at_level(logging.INFO, logger="verl_lite.config"):
        load_config(
            [
                f"{ARR}.actor.ulysses_sequence_parallel_size=1",
                f"{ARR}.model.use_fused_kernels=False",
                f"{ARR}.actor.use_torch_compile=False",
                f"{ARR}.rollout.layered_summon=True",
                "trainer.use_legacy_worker_impl=disable",
                f"{ARR}.actor.profiler.enable=True",
                f"{ARR}.actor.profiler.all_ranks=True",
                f"{ARR}.rollout.agent.num_workers=4",
            ],
            "demo",
        )
    lines = [r.getMessage() for r in caplog.records]
    assert sum("profiler" in line for line in lines) == 1, lines  # one rule, one line
    assert any("use_torch_compile=False" in line for line in lines)
    assert sum("agent.num_workers=4" in line for line in lines) == 1, lines


def test_a_linked_key_is_judged_through_the_key_it_follows():
    # actor.use_fused_kernels follows model.use_fused_kernels: accepted with it, refused alone
    load_config([f"{ARR}.model.use_fused_kernels=True"], "demo")
    with pytest.raises(ConfigError, match=f"set {ARR}.model.use_fused_kernels"):
        load_config([f"{ARR}.actor.use_fused_kernels=True"], "demo")
    legacy = ["reward_model.enable=True", "reward_model.use_reward_loop=False"]
    with pytest.raises(ConfigError, match=r"reward_model.model.input_tokenizer=.* is not supported"):
        load_config(legacy, "ppo_trainer")  # verl's default links the actor's path


def problems(overrides: list[str], config_name: str = "ppo_trainer") -> list[str]:
    try:
        load_config(overrides, config_name)
    except ConfigError as e:
        return list(e.problems)
    return []


def test_a_reward_model_runs_verls_legacy_worker_not_its_reward_loop():
    """verl's reward loop (its default) re-templates the reward model's input: refused with the model on,
    in one line for that key (the loop ignores input_tokenizer, so its default link is not refused too:
    verl's examples/ppo_trainer/run_qwen2-7b_rm_seq_balance.sh and tests/special_e2e run_model_reward.sh);
    without a reward model the key changes nothing, and the loop's engine name is then never read."""
    loop = ["reward_model.enable=True", "reward_model.use_reward_loop=True"]
    assert [p.split(" is not")[0] for p in problems(loop)] == ["reward_model.use_reward_loop=True"]
    assert [p.split(" is not")[0] for p in problems(loop[:1])] == ["reward_model.use_reward_loop=True"]
    rm = ["reward_model.enable=True", "reward_model.model.input_tokenizer=null"]
    assert problems([*rm, "reward_model.use_reward_loop=False", "reward_model.rollout.name=vllm"]) == []
    assert problems(["reward_model.use_reward_loop=True"]) == []


def test_the_reward_models_worker_keys_are_refused_only_with_a_reward_model():
    off = [
        "reward_model.ulysses_sequence_parallel_size=2",
        "reward_model.strategy=megatron",
        "reward_model.max_length=4096",
        "reward_model.enable_resource_pool=True",
        "reward_model.model.fsdp_config.ulysses_sequence_parallel_size=2",
    ]
    assert problems(off) == []
    on = [
        "reward_model.enable=True",
        "reward_model.use_reward_loop=False",
        "reward_model.model.input_tokenizer=null",
    ]
    assert sorted(p.split(" is not supported")[0] for p in problems([*on, *off])) == sorted(off)


def test_every_rule_names_a_key_of_the_schema_and_refusals_say_what_instead():
    assert len(support.BY_KEY) > 100  # RULES and the rules beside the fields
    for rule in support.BY_KEY.values():
        assert keys.is_known(rule.key), rule.key
        if rule.accepted != support.ANY:
            assert rule.instead, f"{rule.key}: a refusal must say what to use instead"


def test_verls_value_spellings():
    assert load_config(["trainer.logger=console"], "demo").trainer.logger == ["console"]
    assert load_config(["trainer.logger='[console, file]'"], "demo").trainer.logger == ["console", "file"]
    assert load_config(["data.val_files=null"], "demo").data.val_files is None
    with pytest.raises(ConfigError, match="trainer.logger=.* must be a name or a list of names"):
        load_config(["trainer.logger=[1,2]"], "demo")


def test_a_key_of_one_s_own_without_plus_is_one_line_naming_the_plus_spelling():
    """Hydra (verl's too) refuses a new key inside a mapping without '+' in two lines that name no fix."""
    line = f"{ARR}.rollout.engine_kwargs.sglang.attention_backend=triton"
    with pytest.raises(OverrideError, match=rf"add it with '\+{line}'$"):
        normalize_argv([line])
    assert normalize_argv([f"+{line}"]) == [f"+{line}"]

"""verl 0.9's and verl 0.7's spellings of a moved key set one value (config/dialects.py): the same
config either way, one console line for the older spelling, both spellings at different values refused
naming both; verl 0.9's V1-trainer and rollout-server keys accepted at verl's defaults, refused by name
when they ask for what is not here."""

import pytest

from verl_lite.config import dialects, keys
from verl_lite.config.compose import load_config
from verl_lite.config.errors import ConfigError
from verl_lite.config.overrides import OverrideError, normalize_argv

ARR = "actor_rollout_ref"

# (verl 0.9 spelling, verl 0.7 spelling, value, where the value lands in the built config)
SAME = [
    (
        "critic.fsdp.param_offload",
        "critic.model.fsdp_config.param_offload",
        "True",
        "critic.fsdp.param_offload",
    ),
    ("reward.reward_manager.name", "reward_model.reward_manager", "dapo", "reward_manager.name"),
    ("reward.reward_manager.name", "reward_manager.name", "dapo", "reward_manager.name"),
    (
        "reward.custom_reward_function.name",
        "custom_reward_function.name",
        "my_score",
        "custom_reward_function.name",
    ),
    ("reward.num_workers", "reward_model.num_workers", "4", "reward_model.num_workers"),
    ("reward.reward_model.model_path", "reward_model.model.path", "/rm", "reward_model.model.path"),
    ("reward.reward_model.enable", "reward_model.enable", "False", "reward_model.enable"),
    (
        "reward.sandbox_fusion.max_concurrent",
        "sandbox_fusion.max_concurrent",
        "8",
        "reward_model.sandbox_fusion.max_concurrent",
    ),
    (
        "reward.reward_model.rollout.gpu_memory_utilization",
        "reward_model.rollout.gpu_memory_utilization",
        "0.3",
        "reward_model.rollout.gpu_memory_utilization",
    ),
]


@pytest.mark.parametrize("new, old, value, lands", SAME, ids=[s[1] for s in SAME])
def test_both_spellings_set_the_same_value_and_only_the_older_one_is_said(new, old, value, lands):
    notes_new, notes_old = [], []
    built_new = load_config(normalize_argv([f"{new}={value}"], notes_new), "demo")
    built_old = load_config(normalize_argv([f"{old}={value}"], notes_old), "demo")
    got = keys.lookup(built_new, lands)
    assert str(got) == value and keys.lookup(built_old, lands) == got
    assert notes_new == []
    assert notes_old == [f"{old}: verl 0.9 spells it {new} (the older spelling is taken as that)"]


def test_both_spellings_at_different_values_are_refused_naming_both_and_equal_ones_are_taken():
    with pytest.raises(OverrideError) as info:
        normalize_argv(
            ["reward.reward_manager.name=dapo", "trainer.total_epochs=1", "reward_model.reward_manager=naive"]
        )
    message = str(info.value)
    assert "\n" not in message
    assert "reward.reward_manager.name=dapo and reward_model.reward_manager=naive" in message
    with pytest.raises(OverrideError, match="critic.fsdp.param_offload=True and critic.model.fsdp_config"):
        normalize_argv(["critic.fsdp.param_offload=True", "+critic.model.fsdp_config.param_offload=False"])
    same = normalize_argv(
        ["critic.fsdp.param_offload=True", "critic.model.fsdp_config.param_offload=true"], []
    )
    assert same == ["critic.fsdp.param_offload=True", "critic.fsdp.param_offload=true"]
    # verl's January config links reward_manager.name to reward_model.reward_manager: not a second value
    linked = ["reward_model.reward_manager=dapo", "reward_manager.name=${reward_model.reward_manager}"]
    assert load_config(normalize_argv(linked, []), "demo").reward_manager.name == "dapo"


def test_a_dapo_script_in_verl_0_9_s_spelling_reaches_the_reward_managers_keys():
    argv = [
        "reward.reward_manager.name=dapo",
        "+reward.reward_kwargs.overlong_buffer_cfg.enable=True",
        "+reward.reward_kwargs.max_resp_len=8",
    ]
    cfg = load_config(normalize_argv(argv, []), "demo")
    assert cfg.reward_manager.name == "dapo"
    assert cfg.reward_model.reward_kwargs == {"overlong_buffer_cfg": {"enable": True}, "max_resp_len": 8}


def test_an_unknown_key_under_a_moved_section_is_named_as_written():
    with pytest.raises(
        OverrideError, match=r"^reward.reward_model.no_such=1: reward.reward_model.no_such is not"
    ):
        normalize_argv(["reward.reward_model.no_such=1"])


def test_every_move_names_keys_the_schema_holds():
    for move in dialects.MOVES:
        assert keys.is_known(move.key), move
        for old in move.older:
            assert not old.startswith("reward."), move


V1_REFUSED = [
    (
        "trainer.v1.sampler.custom_sampler.path=/x.py",
        "trainer.v1.sampler.custom_sampler.path",
        "ReplayBufferAsync",
    ),
    ("+trainer.v1.sync.anything=1", "trainer.v1.sync", "no settings"),
    (f"{ARR}.rollout.nnodes=1", f"{ARR}.rollout.nnodes", "separate_async trainer's"),
    (
        f"{ARR}.rollout.checkpoint_engine.backend=nccl",
        f"{ARR}.rollout.checkpoint_engine.backend",
        "in-process",
    ),
]


@pytest.mark.parametrize("line, key, why", V1_REFUSED, ids=[v[0] for v in V1_REFUSED])
def test_verl_0_9_s_async_trainer_keys_are_refused_by_name(line, key, why):
    with pytest.raises(ConfigError) as info:
        load_config(["trainer.v1.trainer_mode=colocate_async", line], "demo")
    (problem,) = info.value.problems
    assert problem.startswith(f"{key}=") and why in problem


def test_sync_refill_failed_groups_is_refused_only_where_verl_reads_it():
    """verl's sync sampling refills a group whose loops all failed with it True; verl_lite's sync trainer
    does not. The async modes refill such a group whatever it says, in verl as here: accepted there."""
    line = "trainer.v1.sampler.sync_refill_failed_groups=True"
    with pytest.raises(ConfigError) as info:
        load_config(["trainer.use_v1=True", "trainer.v1.trainer_mode=sync", line], "demo")
    (problem,) = info.value.problems
    assert problem.startswith(
        f"{line} is not supported by verl_lite: verl_lite's sync trainer does not refill"
    )
    cfg = load_config(["trainer.use_v1=True", "trainer.v1.trainer_mode=colocate_async", line], "demo")
    assert cfg.trainer.v1.trainer_mode == "colocate_async"


SEPARATE = [
    "trainer.v1.trainer_mode=separate_async",
    f"{ARR}.rollout.nnodes=1",
    f"{ARR}.rollout.n_gpus_per_node=1",
]


def test_separate_async_takes_its_rollout_group_and_refuses_the_hybrid_switch():
    """verl 0.9's separate_async CI script's keys; its transport (checkpoint_engine.backend) is Ray's here."""
    cfg = load_config(
        [
            *SEPARATE,
            "trainer.v1.separate_async.parameter_sync_step=2",
            "trainer.v1.separate_async.num_warmup_batches=2",
            f"{ARR}.rollout.checkpoint_engine.backend=nccl",
        ],
        "demo",
    )
    assert (
        cfg.actor_rollout_ref.rollout.nnodes == 1 and cfg.trainer.v1.separate_async.parameter_sync_step == 2
    )
    with pytest.raises(ConfigError) as info:
        load_config([*SEPARATE, "trainer.v1.separate_async.hybrid_rollout.enable_switch=True"], "demo")
    (problem,) = info.value.problems
    assert problem.startswith("trainer.v1.separate_async.hybrid_rollout.enable_switch=True is not supported")
    assert "leave it False" in problem


def test_colocate_async_and_its_replay_buffer_keys_are_taken():
    cfg = load_config(
        [
            "trainer.v1.trainer_mode=colocate_async",
            "trainer.v1.colocate_async.num_warmup_batches=2",
            "trainer.v1.sampler.max_off_policy_threshold=3",
            "trainer.v1.sampler.max_off_policy_strategy=wait",
        ],
        "demo",
    )
    assert cfg.trainer.v1.colocate_async.num_warmup_batches == 2
    assert cfg.trainer.v1.sampler.max_off_policy_threshold == 3


def test_v1_keys_are_not_read_without_use_v1_nor_separate_async_s_outside_its_mode():
    """verl's legacy trainer (use_v1=False) ignores trainer.v1; colocate_async ignores separate_async's keys."""
    load_config(["trainer.use_v1=False", "trainer.v1.trainer_mode=separate_async"], "demo")
    load_config(
        ["trainer.v1.trainer_mode=colocate_async", "trainer.v1.separate_async.parameter_sync_step=2"], "demo"
    )


def test_verl_0_9_s_trainer_keys_at_their_defaults_run_today_s_trainer():
    cfg = load_config(
        [
            "trainer.use_v1=True",
            "trainer.v1.trainer_mode=sync",
            f"{ARR}.rollout.nnodes=0",
            f"{ARR}.rollout.n_gpus_per_node=8",
            "ray_kwargs.ray_init.runtime_env.py_executable=null",
        ],
        "demo",
    )
    assert cfg.trainer.use_v1 is True and cfg.trainer.v1.trainer_mode == "sync"
    assert load_config(["trainer.use_v1=False"], "demo").trainer.use_v1 is False


def test_py_executable_reaches_a_joined_cluster_as_written(monkeypatch):
    from verl_lite.trainer.ray_start import ray_init_kwargs

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = load_config(
        [
            "ray_kwargs.ray_init.address=head:6379",
            "ray_kwargs.ray_init.runtime_env.py_executable=uv run python",
        ],
        "demo",
    )
    assert ray_init_kwargs(cfg) == {"address": "head:6379", "runtime_env": {"py_executable": "uv run python"}}


def test_every_key_of_verl_s_january_config_is_a_key_or_a_moved_spelling():
    from tests.config.verl_facts import VERL_DEFAULTS

    for key in VERL_DEFAULTS:
        found = dialects.spelling(key)
        assert keys.is_known(found.key if found else key), key


def test_verl_0_9_s_engine_spellings_of_a_role_s_sequence_parallel_and_entropy_keys_set_the_role_s():
    """verl 0.9's scripts write sequence parallelism and the entropy options on the FSDP engine
    section; verl_lite's engine takes them from the role. The role's sequence-parallel key is
    deprecated in verl 0.9 (said); its entropy keys are linked from the engine's there (not said)."""
    notes = []
    argv = [
        f"{ARR}.actor.fsdp_config.ulysses_sequence_parallel_size=2",
        f"{ARR}.ref.fsdp_config.ulysses_sequence_parallel_size=2",
        "critic.fsdp.ulysses_sequence_parallel_size=2",
        f"{ARR}.actor.fsdp_config.entropy_checkpointing=True",
        f"{ARR}.ref.entropy_from_logits_with_chunking=True",
    ]
    cfg = load_config(normalize_argv(argv, notes), "demo")
    arr = cfg.actor_rollout_ref
    assert arr.actor.ulysses_sequence_parallel_size == arr.ref.ulysses_sequence_parallel_size == 2
    assert cfg.critic.ulysses_sequence_parallel_size == 2 and arr.actor.entropy_checkpointing is True
    assert arr.ref.entropy_from_logits_with_chunking is True
    assert arr.actor.fsdp_config.ulysses_sequence_parallel_size == 1  # verl_lite's engine reads the role's
    assert notes == []
    normalize_argv([f"{ARR}.actor.ulysses_sequence_parallel_size=2"], notes)
    assert notes == [
        f"{ARR}.actor.ulysses_sequence_parallel_size: verl 0.9 spells it "
        f"{ARR}.actor.fsdp_config.ulysses_sequence_parallel_size (the older spelling is taken as that)"
    ]


def test_the_cli_says_an_older_spelling_once_and_refuses_two_spellings_before_hydra(tmp_path):
    """The console line comes from main_ppo (before Hydra it only collects them): one line per older
    spelling, then the run goes on (here to a refused value, before Ray); a conflict is one line."""
    import subprocess
    import sys

    def cli(*args):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "verl_lite.main_ppo",
                "--config-name",
                "demo",
                f"hydra.run.dir={tmp_path}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )

    proc = cli("critic.model.fsdp_config.param_offload=True", "data.train_batch_size=0")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "verl_lite: data.train_batch_size=0 must be a positive integer" in out, (
        out
    )
    said = [line for line in out.splitlines() if "verl 0.9 spells it" in line]
    assert len(said) == 1 and said[0].endswith(
        "critic.model.fsdp_config.param_offload: verl 0.9 spells it critic.fsdp.param_offload "
        "(the older spelling is taken as that)"
    )
    proc = cli("reward.reward_manager.name=dapo", "reward_model.reward_manager=naive")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "verl_lite: reward.reward_manager.name=dapo and reward_model.reward_manager=naive set one value "
        "(verl 0.9's reward.reward_manager.name) two ways; keep one, in verl 0.9's spelling reward.reward_manager.name"
    ], proc.stderr


def test_verl_0_9_s_engine_group_dp_is_verl_lite_s_engine_and_the_others_are_refused_by_name():
    assert normalize_argv(["model_engine=dp", "trainer.total_epochs=1"]) == ["trainer.total_epochs=1"]
    with pytest.raises(OverrideError, match=r"^model_engine=megatron: verl_lite's engine is FSDP2"):
        normalize_argv(["model_engine=megatron"])

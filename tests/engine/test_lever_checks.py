"""Start-up rules of sequence parallelism and HSDP (engine/checks.py, with engine/mesh.py's and
engine/ulysses.py's rules): one line per problem naming key, value and fix, for the engines the run
builds; and the batch geometry over world / sp data-parallel ranks."""

import pytest

from verl_lite.config.common import dp_size
from verl_lite.config.compose import load_config
from verl_lite.config.errors import ConfigError
from verl_lite.preflight import prepare

ARR = "actor_rollout_ref"
PACKED = (f"{ARR}.model.use_remove_padding=True", "critic.model.use_remove_padding=True")


def problems(*overrides) -> list[str]:
    """The problems about the levers and the batch geometry (the demo's verl_lite:// assets are not
    folders here: validate reports them too, and they are left out)."""
    with pytest.raises(ConfigError) as info:
        prepare(load_config(list(overrides), "demo"), num_gpus=0)
    return [p for p in info.value.problems if "verl_lite://" not in p]


def assert_valid(cfg) -> None:
    assert problems_of(cfg) == []


def problems_of(cfg) -> list[str]:
    try:
        prepare(cfg, num_gpus=0)
    except ConfigError as e:
        return [p for p in e.problems if "verl_lite://" not in p]
    return []


def test_sequence_parallel_size_must_divide_the_workers_and_needs_packing():
    assert problems(*PACKED, f"{ARR}.actor.ulysses_sequence_parallel_size=3") == [
        f"{ARR}.actor.ulysses_sequence_parallel_size=3 must divide the 2 workers (trainer.nnodes x "
        "trainer.n_gpus_per_node); use one of [1, 2]"
    ]
    (line,) = problems(
        f"{ARR}.model.use_remove_padding=False", f"{ARR}.actor.ulysses_sequence_parallel_size=2"
    )
    assert line.startswith(f"{ARR}.actor.ulysses_sequence_parallel_size=2 needs packed sequences")
    (line,) = problems(
        "algorithm.adv_estimator=gae",
        "critic.model.use_remove_padding=False",
        "critic.ulysses_sequence_parallel_size=2",
    )
    assert line.startswith("critic.ulysses_sequence_parallel_size=2 needs packed sequences")


def test_the_reference_follows_the_actors_groups():
    (line,) = problems(
        *PACKED,
        f"{ARR}.actor.use_kl_loss=True",
        f"{ARR}.actor.ulysses_sequence_parallel_size=2",
        f"{ARR}.ref.ulysses_sequence_parallel_size=1",
    )
    assert "the reference runs in the actor's workers" in line


def test_a_roles_levers_are_read_only_with_the_role():
    """verl builds no reference without a KL term, no critic without gae, no reward model unless
    enabled: their sizes mean nothing then (4 workers here, so that 3 divides nothing)."""
    unused = [
        f"{ARR}.ref.fsdp_config.fsdp_size=3",
        "critic.ulysses_sequence_parallel_size=3",
        "critic.fsdp.fsdp_size=3",
        "reward_model.model.fsdp_config.fsdp_size=3",
        f"{ARR}.ref.ulysses_sequence_parallel_size=2",
    ]

    def levers(*overrides):
        four = ("trainer.n_gpus_per_node=4", "ray_kwargs.ray_init.num_cpus=4")
        return [p.split("=")[0] for p in problems_of(load_config([*PACKED, *four, *overrides], "demo"))]

    assert levers(*unused) == []
    assert sorted(levers("algorithm.adv_estimator=gae", f"{ARR}.actor.use_kl_loss=True", *unused)) == sorted(
        [u.split("=")[0] for u in unused if not u.startswith("reward_model")]
    )


def test_fsdp_size_must_divide_the_workers():
    (line,) = problems(
        "trainer.n_gpus_per_node=4", "ray_kwargs.ray_init.num_cpus=4", f"{ARR}.actor.fsdp_config.fsdp_size=3"
    )
    assert (
        line
        == f"{ARR}.actor.fsdp_config.fsdp_size=3 must divide the 4 workers, or be -1 (shard over all); use one of [1, 2, 4] or -1"
    )
    four = [
        "trainer.n_gpus_per_node=4",
        "ray_kwargs.ray_init.num_cpus=4",
        "critic.fsdp.fsdp_size=3",
    ]
    assert problems_of(load_config([*four, "algorithm.adv_estimator=gae"], "demo")) == [
        "critic.fsdp.fsdp_size=3 must divide the 4 workers, or be -1 (shard over all); "
        "use one of [1, 2, 4] or -1"
    ]
    assert problems_of(load_config(four, "demo")) == []  # GRPO builds no critic: its section is not read
    for ok in (-1, 1, 2, 8):  # at least the world: all ranks, as verl
        assert_valid(load_config([f"{ARR}.actor.fsdp_config.fsdp_size={ok}"], "demo"))


def test_geometry_counts_data_parallel_ranks():
    """sp 2 on 4 workers: 2 data-parallel ranks; the mini-batch (16 x 8 responses) splits 2 ways."""
    base = [
        *PACKED,
        "trainer.n_gpus_per_node=4",
        "ray_kwargs.ray_init.num_cpus=4",  # 4 workers fit (the machine check comes before the geometry)
        f"{ARR}.actor.ulysses_sequence_parallel_size=2",
    ]
    cfg = load_config(
        [*base, f"{ARR}.actor.ppo_micro_batch_size=8", f"{ARR}.actor.ppo_micro_batch_size_per_gpu=null"],
        "demo",
    )
    assert_valid(cfg)
    assert dp_size(cfg) == 2 and cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 4  # 8 / dp 2
    msgs = problems(
        *base, f"{ARR}.actor.ppo_mini_batch_size=1", f"{ARR}.rollout.n=3", "data.train_batch_size=4"
    )
    assert any("1 x 3 = 3 responses cannot be split over 2 data-parallel ranks" in m for m in msgs), msgs


def test_sequence_parallel_size_must_divide_the_attention_heads(tmp_path):
    """Start-up reads each trained model's config.json: sp splits its query heads (the rule the
    engine applies, engine/ulysses.heads_problem)."""
    import json

    from verl_lite.roles import run_of
    from verl_lite.workers.checks import check_lever_heads

    folder = tmp_path / "actor"
    folder.mkdir()
    cfg = load_config(
        [*PACKED, f"{ARR}.actor.ulysses_sequence_parallel_size=2", f"{ARR}.model.path={folder}"], "demo"
    )
    run = run_of(cfg, num_gpus=0)
    for heads, expected in (
        (14, []),
        (
            7,
            [
                f"{ARR}.actor.ulysses_sequence_parallel_size=2 must divide the 7 attention heads of {ARR}.model.path='{folder}'; use one of [1]"
            ],
        ),
    ):
        (folder / "config.json").write_text(json.dumps({"num_attention_heads": heads}))
        assert check_lever_heads(cfg, run) == expected

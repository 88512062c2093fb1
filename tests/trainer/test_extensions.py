"""Every registered advantage estimator and policy loss, built through the real start-up path without Ray.

Estimators: the CLI's build_trainer (validation, datasets, reward functions, the trainer) gives a phase
list with the spec's phases, the critic's phases exactly when the spec needs a critic, every batch
tensor the estimator reads produced by a phase before `adv`, and the `adv` phase turns a scored batch
into finite advantages. Losses: the actor's loss function (what the engine calls per micro-batch)
gives a finite loss with a gradient and the metrics the loss reports. Refused and unknown names stop
start-up with one line.
"""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from verl_lite.algos import ADV_ESTIMATORS, POLICY_LOSSES
from verl_lite.algos.loss_agg import LossScale
from verl_lite.algos.registry import REWARD_EXTRA
from verl_lite.config.compose import load_config
from verl_lite.config.errors import ConfigError
from verl_lite.config.schema import TINY_MODEL, TINY_TRAIN
from verl_lite.data.assets import resolve_paths
from verl_lite.engine.forward import TokenRequest, response_token_outputs
from verl_lite.errors import RunError
from verl_lite.main_ppo import SetupError, build_trainer
from verl_lite.preflight import prepare
from verl_lite.preflight_early import check_placeholders
from verl_lite.protocol import DataProto
from verl_lite.roles import run_of
from verl_lite.workers.actor import PPOActor

ARR = "actor_rollout_ref"
N = 4  # responses per prompt: every estimator's minimum group size is at most this
# the batch tensor each trainer phase adds that an estimator may read ("index" is the uid every step has)
PRODUCED_BY = {
    REWARD_EXTRA: "reward",  # the reward function's extra info, per response
    "values": "values",
    "reward_baselines": "gen_max",
    "old_log_probs": "old_log_prob",
    "sum_pi_squared": "old_log_prob",
}
# what a name needs set beyond its spec's `requires` (a key without a default it can run with)
NEEDS = {
    "gdpo": ["+algorithm.gdpo_reward_keys=[acc,fmt]"],
    "dro": [f"{ARR}.actor.policy_loss.dro_beta=0.1"],
}


def load(tmp_path, *overrides):
    """The demo config (tiny model and task, fp32, CPU) at a small batch, with `overrides`."""
    base = [
        f"{ARR}.model.path={TINY_MODEL}",
        f"data.train_files={TINY_TRAIN}",
        "data.val_files=null",
        "data.train_batch_size=4",
        f"{ARR}.rollout.n={N}",
        f"{ARR}.rollout.name=hf",
        f"{ARR}.actor.ppo_mini_batch_size=4",
        f"{ARR}.actor.ppo_micro_batch_size_per_gpu=4",
        "trainer.n_gpus_per_node=2",
        "trainer.device=cpu",
        "trainer.resume_mode=disable",
        f"trainer.default_local_dir={tmp_path}",
    ]
    cfg = load_config([*base, *overrides], "demo")
    resolve_paths(cfg, None)  # the embedded model and data, as start-up does before checking
    return cfg


def _scored_batch(trainer, rows: int = 8, width: int = 5) -> DataProto:
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([5, 3, 1, 4, 2, 5, 5, 3])[:rows]
    mask = (torch.arange(width) < lengths.unsqueeze(1)).float()
    rewards = torch.zeros(rows, width)
    rewards[torch.arange(rows), lengths - 1] = torch.tensor([1.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.0, 0.0])[:rows]
    tensors = {
        "token_level_rewards": rewards,
        "response_mask": mask,
        "values": torch.randn(rows, width, generator=g) * mask,
        "reward_baselines": torch.rand(rows, generator=g),
        "old_log_probs": -torch.rand(rows, width, generator=g) * mask,
        "sum_pi_squared": torch.rand(rows, width, generator=g) * mask,
    }
    uid = np.array([f"p{i // N}" for i in range(rows)], dtype=object)
    extra = np.array([{"acc": float(i % 2), "fmt": float(i % 3 == 0)} for i in range(rows)], dtype=object)
    return DataProto.from_dict(tensors, non_tensors={"uid": uid, REWARD_EXTRA: extra})


@pytest.mark.parametrize("name", ADV_ESTIMATORS.names())
def test_every_estimator_builds_its_phases_and_advantages(name, tmp_path):
    spec = ADV_ESTIMATORS.spec(name)
    requires = [f"{key}={value}" for key, value in spec.requires]
    trainer = build_trainer(
        load(tmp_path, f"algorithm.adv_estimator={name}", *requires, *NEEDS.get(name, []))
    )
    phases = [phase for phase, _ in trainer.phases]
    assert set(spec.phases) <= set(phases)
    assert ({"values", "update_critic"} <= set(phases)) == spec.needs_critic == trainer.run.critic
    before_adv = phases[: phases.index("adv")]
    for tensor in spec.inputs:
        assert tensor == "index" or PRODUCED_BY[tensor] in before_adv, (
            f"{name} reads {tensor}: no phase makes it"
        )
    batch = trainer.step_phases._advantage(_scored_batch(trainer), {})
    advantages, mask = batch.batch["advantages"], batch.batch["response_mask"]
    assert advantages.shape == mask.shape and torch.isfinite(advantages).all()
    assert (advantages[mask == 0] == 0).all() and (advantages != 0).any()
    assert torch.isfinite(batch.batch["returns"]).all()


class _Micro(dict):
    """A micro-batch as the engine hands it to a loss: tensors by name and its response width."""

    width = 4


def _output(logits, micro):
    """What the engine's forward gives the actor's loss: per-token log-probs and entropy."""
    return SimpleNamespace(tokens=response_token_outputs(logits, micro, TokenRequest(entropy=True)))


def _micro(rows=6, prompt=3, width=_Micro.width, vocab=11):
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([4, 2, 3, 1, 4, 4])[:rows]
    return _Micro(
        {
            "responses": torch.randint(vocab, (rows, width), generator=g),
            "response_mask": (torch.arange(width) < lengths.unsqueeze(1)).float(),
            "old_log_probs": -torch.rand(rows, width, generator=g) - 1.0,
            "advantages": torch.randn(rows, 1, generator=g).expand(rows, width).contiguous(),
        }
    ), torch.randn(rows, prompt + width, vocab, generator=g)


@pytest.mark.parametrize("mode", POLICY_LOSSES.names())
def test_every_policy_loss_runs_in_the_actor_loss_function(mode, tmp_path):
    cfg = load(tmp_path, f"{ARR}.actor.policy_loss.loss_mode={mode}", *NEEDS.get(mode, []))
    prepare(cfg, num_gpus=0)
    actor = PPOActor(None, cfg.actor_rollout_ref.actor, response_length=4, temperature=1.0)
    micro, logits = _micro()
    logits.requires_grad_(True)
    loss, shares = actor.loss(_output(logits, micro), micro, LossScale.of(micro["response_mask"]))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0
    assert {"pg_loss", "entropy"} <= set(shares)
    reported = {"pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"} & set(shares)
    expected = {"gpg": set(), "kl_cov": {"ppo_kl"}, "clip_cov": {"pg_clipfrac", "ppo_kl"}, "dro": {"ppo_kl"}}
    assert reported == expected.get(mode, {"pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"}), reported


def test_a_loss_key_reaches_the_loss(tmp_path):
    # sapo's gate temperature: the same micro-batch gives another loss when tau_pos / tau_neg change
    micro, logits = _micro()
    losses = []
    for tau in ("1.0", "3.0"):
        cfg = load(
            tmp_path,
            f"{ARR}.actor.policy_loss.loss_mode=sapo",
            f"{ARR}.actor.tau_pos={tau}",
            f"{ARR}.actor.tau_neg={tau}",
        )
        actor = PPOActor(None, cfg.actor_rollout_ref.actor, response_length=4, temperature=1.0)
        loss, _ = actor.loss(_output(logits, micro), micro, LossScale.of(micro["response_mask"]))
        losses.append(float(loss))
    assert losses[0] != losses[1]


def test_refused_and_unknown_names_stop_start_up_with_one_line(tmp_path):
    with pytest.raises(SetupError, match="loss_mode=bypass_mode is not supported by verl_lite: .* use "):
        build_trainer(load(tmp_path, f"{ARR}.actor.policy_loss.loss_mode=bypass_mode"))
    with pytest.raises(ConfigError) as info:
        prepare(
            load(tmp_path, "algorithm.adv_estimator=grpo_plus", f"{ARR}.actor.policy_loss.loss_mode=ppo"), 0
        )
    assert "algorithm.adv_estimator='grpo_plus' is not a known advantage estimator; choose one of [" in str(
        info.value
    )
    assert "loss_mode='ppo' is not a known policy loss; choose one of [" in str(info.value)


def test_spec_rules_are_checked_before_ray(tmp_path):
    cases = {
        ("algorithm.adv_estimator=grpo_passk", f"{ARR}.rollout.n=1"): "algorithm.adv_estimator=grpo_passk "
        f"needs {ARR}.rollout.n >= 2 (it compares a group's best response with its second best; verl refuses "
        "fewer too), got 1",
        (
            f"{ARR}.actor.policy_loss.loss_mode=kl_cov",
            f"{ARR}.actor.policy_loss.kl_cov_ratio=0",
        ): f"{ARR}.actor.policy_loss.kl_cov_ratio=0.0 must be > 0 (fraction of tokens to penalise); "
        f"{ARR}.actor.policy_loss.loss_mode=kl_cov reads it",
        (f"{ARR}.actor.clip_ratio_c=1.0",): f"{ARR}.actor.clip_ratio_c=1.0 must be > 1",
        ("algorithm.adv_estimator=optimal_token_baseline",): "algorithm.adv_estimator=optimal_token_baseline "
        f"needs {ARR}.actor.calculate_sum_pi_squared=True, got False",
        ("algorithm.adv_estimator=gae", "critic.enable=False"): "algorithm.adv_estimator=gae needs a critic",
    }
    for overrides, line in cases.items():
        with pytest.raises(ConfigError) as info:
            prepare(load(tmp_path, *overrides), 0)
        assert any(p.startswith(line) for p in info.value.problems), info.value.problems
    # critic.enable=True trains a critic whatever the estimator (verl's need_critic), so its path matters
    trainer = build_trainer(load(tmp_path, "algorithm.adv_estimator=grpo", "critic.enable=True"))
    assert trainer.run.critic and "update_critic" in [phase for phase, _ in trainer.phases]
    placeholder = "critic.model.path='~/models/deepseek-llm-7b-chat'"
    with_critic = load_config(["critic.enable=True", placeholder], "demo")
    (problem,) = check_placeholders(with_critic, run_of(with_critic, 0))
    assert "critic.model.path=~/models/deepseek-llm-7b-chat: verl's placeholder" in problem
    without = load_config(["critic.enable=False", placeholder], "demo")
    assert check_placeholders(without, run_of(without, 0)) == []  # no critic: no matter
    # the dual-clip cap is vanilla's key: other losses do not read it (verl checks it in vanilla only)
    prepare(load(tmp_path, f"{ARR}.actor.policy_loss.loss_mode=gspo", f"{ARR}.actor.clip_ratio_c=1.0"), 0)


GDPO_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    accuracy = float(solution_str.strip() == ground_truth)
    fmt = float(solution_str.strip().isdigit())
    return {"score": accuracy + fmt, "accuracy_reward": accuracy, "format_reward": fmt}
"""


def test_gdpo_reads_the_components_the_reward_function_returned(tmp_path):
    """verl's GDPO launch (examples/gdpo_trainer): the gdpo manager keeps every key of the reward
    function's dict, the trainer keeps them per response, gdpo normalises each within its group."""
    path = tmp_path / "components.py"
    path.write_text(GDPO_REWARD)
    trainer = build_trainer(
        load(
            tmp_path,
            "algorithm.adv_estimator=gdpo",
            "+algorithm.gdpo_reward_keys=[accuracy_reward,format_reward]",
            "reward.reward_manager.name=gdpo",
            f"reward.custom_reward_function.path={path}",
        )
    )
    tok, rows = trainer.tokenizer, 8
    texts = [
        "12",
        "12",
        "x",
        "13",
        "7",
        "7",
        "7",
        "x",
    ]  # ground truth 12 for the first group, 7 for the second
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = max(map(len, ids))
    responses = torch.tensor([i + [tok.pad_token_id] * (width - len(i)) for i in ids])
    mask = (torch.arange(width) < torch.tensor([len(i) for i in ids]).unsqueeze(1)).float()
    truth = [{"ground_truth": "12"}] * 4 + [{"ground_truth": "7"}] * 4
    batch = DataProto.from_dict(
        {"responses": responses, "response_mask": mask},
        non_tensors={
            "uid": np.array([f"p{i // N}" for i in range(rows)], dtype=object),
            "data_source": np.array(["verl_lite/arith"] * rows, dtype=object),
            "reward_model": np.array(truth, dtype=object),
        },
    )
    metrics = {}
    batch = trainer.step_phases._reward(batch, metrics)
    extra = batch.non_tensor_batch[REWARD_EXTRA]
    assert [e["accuracy_reward"] for e in extra] == [1, 1, 0, 0, 1, 1, 1, 0]
    assert [e["format_reward"] for e in extra] == [1, 1, 0, 1, 1, 1, 1, 0]
    batch = trainer.step_phases._advantage(batch, metrics)
    adv = batch.batch["advantages"][:, 0]
    # group 1: "13" has the format, not the answer; "x" neither: GDPO ranks 12 > 13 > x
    assert adv[0] == adv[1] > adv[3] > adv[2]
    assert metrics["gdpo/accuracy_reward/mean"] == 0.625 and metrics["gdpo/format_reward/min"] == 0.0
    # a component the reward function does not return: one line naming it (RunError: main_ppo's form)
    for row in batch.non_tensor_batch[REWARD_EXTRA]:
        row.pop("format_reward")
    with pytest.raises(
        RunError, match=r"^algorithm.adv_estimator=gdpo: algorithm.gdpo_reward_keys: the reward "
    ):
        trainer.step_phases._advantage(batch, {})

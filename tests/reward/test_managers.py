"""Reward managers by name: DAPO's overlong-buffer penalty by hand, bad reward_kwargs named, and the
CLI wiring (reward_model.reward_manager=dapo with verl's '+reward_model.reward_kwargs...' overrides)."""

import math

import pytest
import torch

from tests.helpers.models import response_batch
from tests.test_main_ppo import SMALL, read_metrics, run_cli
from tests.test_preflight import load, normalize
from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.main_ppo import SetupError, build_trainer
from verl_lite.reward.managers import REWARD_MANAGERS, DAPORewardManager, build_reward_manager
from verl_lite.reward.naive import NaiveRewardManager, RewardError
from verl_lite.reward.scorers import default_compute_score

WIDTH = 8  # response tokens of a batch


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_overlong_penalty_by_hand(tok):
    # max_resp_len 6, buffer 4 -> responses up to 6 - 4 = 2 tokens are free;
    # penalty = min(-(length - 2) / 4 * factor, 0) with factor 1:
    #   "7"+EOS     2 tokens, score 0: exceed 0 -> 0       -> reward 0
    #   "46"+EOS    3 tokens, score 1: exceed 1 -> -0.25   -> reward 0.75
    #   "12345"+EOS 6 tokens, score 0: exceed 4 -> -1      -> reward -1
    #   ""+EOS      1 token,  score 0: exceed -1 -> min(+0.25, 0) = 0
    manager = build_reward_manager(
        "dapo",
        tok,
        default_compute_score,
        reward_kwargs={"max_resp_len": 6, "overlong_buffer_cfg": {"enable": True, "len": 4, "log": True}},
    )
    assert isinstance(manager, DAPORewardManager)
    rewards, extra = manager(response_batch(tok, ["7", "46", "12345", ""], WIDTH))
    torch.testing.assert_close(rewards.sum(-1), torch.tensor([0.0, 0.75, -1.0, 0.0]))
    assert rewards[1, 2] == 0.75 and rewards[1, :2].sum() == 0  # on the last valid token
    assert extra == {
        "acc": [0.0, 1.0, 0.0, 0.0],
        "overlong_reward": [0.0, -0.25, -1.0, 0.0],
        "overlong": [0.0, 1.0, 1.0, 0.0],
    }


def test_penalty_factor_and_disabled_buffer(tok):
    batch = response_batch(tok, ["46", "12345"], WIDTH)
    half = build_reward_manager(
        "dapo",
        tok,
        default_compute_score,
        reward_kwargs={"overlong_buffer_cfg": {"enable": True, "len": 4, "penalty_factor": 0.5}},
        max_response_length=6,  # max_resp_len from the rollout length when not given
    )
    # factor 0.5: "46"+EOS 1 - 0.25*0.5 = 0.875; "12345"+EOS 0 - 1*0.5 = -0.5; no log keys
    rewards, extra = half(batch)
    torch.testing.assert_close(rewards.sum(-1), torch.tensor([0.875, -0.5]))
    assert set(extra) == {"acc"}
    off = build_reward_manager("dapo", tok, default_compute_score, max_response_length=6)
    naive = build_reward_manager("naive", tok, default_compute_score)
    assert type(naive) is NaiveRewardManager
    torch.testing.assert_close(off(batch)[0], naive(batch)[0])  # disabled: the naive rewards


def test_bad_reward_kwargs_are_named(tok):
    def build(name, kwargs, max_len=8):
        return build_reward_manager(
            name, tok, default_compute_score, reward_kwargs=kwargs, max_response_length=max_len
        )

    with pytest.raises(ValueError, match=r"reward_model.reward_kwargs has keys \['max_resp_len'\].*'naive'"):
        build("naive", {"max_resp_len": 8})
    with pytest.raises(ValueError, match=r"overlong_buffer_cfg: unknown keys \['length'\]"):
        build("dapo", {"overlong_buffer_cfg": {"enable": True, "length": 4}})
    with pytest.raises(ValueError, match=r"overlong_buffer_cfg.len=0 must be > 0"):
        build("dapo", {"overlong_buffer_cfg": {"enable": True}})
    with pytest.raises(ValueError, match=r"max_resp_len=2 must be set and >= .*len=4"):
        build("dapo", {"max_resp_len": 2, "overlong_buffer_cfg": {"enable": True, "len": 4}})
    with pytest.raises(ValueError, match="reward_model.reward_manager='nope'"):
        build("nope", {})
    assert REWARD_MANAGERS.names() == ["batch", "dapo", "gdpo", "naive", "prime"]  # verl 0.9's five


@pytest.mark.slow
def test_cli_dapo_overlong_with_gspo(tmp_path):
    """verl's DAPO overrides, verbatim in form, through Hydra, main_ppo and a real 2-step run."""
    result = run_cli(
        tmp_path,
        *SMALL,
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        "reward_model.reward_manager=dapo",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.len=4",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.log=True",
        "+reward_model.reward_kwargs.max_resp_len=8",
        "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        join=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    steps = read_metrics(tmp_path)
    assert len(steps) == 2
    for m in steps:
        # responses of the tiny task are 2-8 tokens; the penalty is in (-1, 0] and counted per response
        assert -1.0 <= m["reward_extra/overlong_reward/mean"] <= 0.0
        assert 0.0 <= m["reward_extra/overlong/mean"] <= 1.0
        assert math.isfinite(m["actor/pg_loss"])
        # reward = acc + overlong_reward on every response, so their means add up
        assert m["critic/rewards/mean"] == pytest.approx(
            m["reward_extra/acc/mean"] + m["reward_extra/overlong_reward/mean"], abs=1e-5
        )


def test_main_ppo_rejects_unknown_reward_kwargs_at_setup():
    """main_ppo's setup builds the manager from the composed config and names the bad key."""
    cfg = load("+reward_model.reward_kwargs.max_resp_len=8")  # naive takes no kwargs
    with pytest.raises(SetupError, match=r"reward_model.reward_kwargs has keys \['max_resp_len'\]"):
        build_trainer(cfg)


def test_extra_info_keeps_a_dicts_every_key_and_a_plain_number_as_verls_managers_do(tok):
    """verl 0.9's naive and dapo managers keep every key of a dict result ("score" too); dapo records
    a plain number as acc, naive records nothing for it."""
    batch = response_batch(tok, ["46", "7"], WIDTH)

    def as_dict(**kw):
        return {"score": default_compute_score(**kw), "acc": 0.5, "format": 1.0}

    for name in ("naive", "dapo", "gdpo"):
        _, extra = build_reward_manager(name, tok, as_dict)(batch)
        assert extra == {"score": [1.0, 0.0], "acc": [0.5, 0.5], "format": [1.0, 1.0]}, name
    assert build_reward_manager("naive", tok, default_compute_score)(batch)[1] == {}
    for name in ("dapo", "gdpo"):
        assert build_reward_manager(name, tok, default_compute_score)(batch)[1] == {"acc": [1.0, 0.0]}, name


def test_the_reward_fn_key_column_reaches_the_scorer_as_data_source(tok):
    """data.reward_fn_key names the dataset's column; the dataset hands its value on as data_source
    (data/rlhf_dataset.py), which the scorer gets as verl's legacy managers pass it."""
    seen = []

    def score(data_source, solution_str, ground_truth, extra_info=None):
        seen.append(data_source)
        return 1.0

    build_reward_manager("naive", tok, score, reward_fn_key="source")(response_batch(tok, ["46"], WIDTH))
    assert seen == ["verl_lite/arith"]


def test_the_batch_manager_calls_the_function_once_with_lists_as_verl_does(tok, tmp_path):
    """verl's batch manager: one call per batch, a list under each name, reward_model.reward_kwargs
    beside them; one result per row, on its last valid token; a dict's keys kept."""
    calls = []

    def batch_score(data_sources, solution_strs, ground_truths, extra_infos, scale=1.0):
        calls.append((list(data_sources), list(solution_strs), list(ground_truths), len(extra_infos), scale))
        return [{"score": scale * float(s == g), "len": len(s)} for s, g in zip(solution_strs, ground_truths)]

    manager = build_reward_manager("batch", tok, batch_score, reward_kwargs={"scale": 2.0})
    rewards, extra = manager(response_batch(tok, ["46", "7"], WIDTH))
    assert calls == [(["verl_lite/arith"] * 2, ["46", "7"], ["46", "46"], 2, 2.0)]
    assert rewards.sum(-1).tolist() == [2.0, 0.0] and rewards[0, 2] == 2.0  # "4", "6", EOS: on the EOS
    assert extra == {"score": [2.0, 0.0], "len": [2, 1]}
    plain = build_reward_manager("batch", tok, lambda **kw: [0.5] * len(kw["solution_strs"]))
    assert plain(response_batch(tok, ["46"], WIDTH))[1] == {}  # verl's batch manager: no acc
    with pytest.raises(
        RewardError, match=r"returned \[1\.0\] for the batch's 2 rows; .*one score .* per row, 2"
    ):
        build_reward_manager("batch", tok, lambda **kw: [1.0])(response_batch(tok, ["46", "7"], WIDTH))
    with pytest.raises(RewardError, match="raised ZeroDivisionError: division by zero on the batch's 1 rows"):
        build_reward_manager("batch", tok, lambda **kw: [1 / 0])(response_batch(tok, ["46"], WIDTH))


def test_the_batch_managers_function_is_checked_for_the_batch_call_at_start_up(tmp_path):
    from verl_lite.reward.scorers import BATCH_CALL, load_custom_scorer

    path = tmp_path / "rewards.py"
    path.write_text(
        "def per_row(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"
        "def per_batch(data_sources, solution_strs, ground_truths, extra_infos):\n    return [1.0] * len(data_sources)\n"
    )
    assert load_custom_scorer(str(path), "per_batch", call=BATCH_CALL).__name__ == "per_batch"
    with pytest.raises(
        ValueError, match=r"cannot take verl's call per_row\(data_sources=\.\.\., solution_strs="
    ):
        load_custom_scorer(str(path), "per_row", call=BATCH_CALL)
    problems = normalize(load("reward_model.reward_manager=batch"))
    assert any("reward_manager.name=batch calls the reward function once per batch" in p for p in problems)


def test_the_prime_manager_scores_in_processes_and_a_failing_row_is_0_and_counted(tok, tmp_path, caplog):
    """verl's prime manager: the function called positionally in forked processes; a tuple's first
    item is the score; a row whose function raises is scored 0 (verl's rule), said in one warning and
    counted in extra info (reward_extra/prime_failed/mean)."""
    from verl_lite.reward.scorers import load_custom_scorer

    path = tmp_path / "prime_rewards.py"
    path.write_text(
        "import os\n"
        "def score(task, completion, reference, task_extra_info):  # verl's positional names\n"
        "    if completion == '7':\n"
        "        raise ValueError('cannot parse')\n"
        "    return (float(completion == reference), os.getpid())\n"
    )
    fn = load_custom_scorer(str(path), "score", positional=True)
    manager = build_reward_manager("prime", tok, fn)
    with caplog.at_level("WARNING", logger="verl_lite"):
        rewards, extra = manager(response_batch(tok, ["46", "7", "5"], WIDTH))
    assert rewards.sum(-1).tolist() == [1.0, 0.0, 0.0] and rewards[0, 2] == 1.0
    assert extra == {"prime_failed": [0.0, 1.0, 0.0]}
    assert "prime: 1 of 3 rows scored 0" in caplog.text and "ValueError: cannot parse" in caplog.text
    with pytest.raises(ValueError, match="cannot take verl's call"):
        load_custom_scorer(str(path), "score")  # the other managers call by keyword
    with pytest.raises(RewardError, match="prime takes a number or a tuple"):
        build_reward_manager("prime", tok, dict_score)(response_batch(tok, ["46"], WIDTH))


def dict_score(data_source, solution_str, ground_truth, extra_info=None):  # module level: it pickles
    return {"score": 1.0}

"""Rule scoring and the naive reward manager: reward on the last token, loud failures."""

import numpy as np
import pytest

from tests.helpers.models import response_batch
from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.reward.naive import NaiveRewardManager, RewardError
from verl_lite.reward.scorers import default_compute_score, load_custom_scorer, score_arith

WIDTH = 6  # response tokens of a batch


def test_arith_scorer_is_strict():
    assert score_arith("", "46", "46") == 1.0
    assert score_arith("", " 46 ", "46") == 1.0
    assert score_arith("", "46.", "46") == 0.0
    assert score_arith("", "4 6", "46") == 0.0
    assert score_arith("", "", "46") == 0.0


def test_reward_sits_on_the_last_valid_token():
    tok = build_tokenizer()
    rewards, _ = NaiveRewardManager(tok, default_compute_score)(response_batch(tok, ["46", "7", "46"], WIDTH))
    assert rewards.sum(-1).tolist() == [1.0, 0.0, 1.0]
    assert rewards[0, 2] == 1.0 and rewards[0, :2].sum() == 0  # "4", "6", EOS: on the EOS


def test_unknown_source_and_bad_scorers_fail_loudly(tmp_path):
    tok = build_tokenizer()
    with pytest.raises(RuntimeError, match="no reward scorer for data_source='other'"):
        NaiveRewardManager(tok, default_compute_score)(response_batch(tok, ["1"], WIDTH, source="other"))
    with pytest.raises(RewardError, match="returned 'yes' .* must return a finite number"):
        NaiveRewardManager(tok, lambda **k: "yes")(response_batch(tok, ["1"], WIDTH))
    with pytest.raises(RewardError, match="returned nan .* must return a finite number"):
        NaiveRewardManager(tok, lambda **k: float("nan"))(response_batch(tok, ["1"], WIDTH))


def test_custom_scorer_from_file_and_extra_info(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text(
        "def my_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return {'score': float(len(solution_str)), 'chars': len(solution_str)}\n"
    )
    fn = load_custom_scorer(str(path), "my_score")
    tok = build_tokenizer()
    rewards, extra = NaiveRewardManager(tok, fn)(response_batch(tok, ["123", "4"], WIDTH))
    assert rewards.sum(-1).tolist() == [3.0, 1.0] and extra == {"score": [3.0, 1.0], "chars": [3, 1]}
    with pytest.raises(AttributeError, match="custom_reward_function.name='nope'"):
        load_custom_scorer(str(path), "nope")
    with pytest.raises(FileNotFoundError, match="custom_reward_function.path"):
        load_custom_scorer(str(tmp_path / "missing.py"), "x")


@pytest.mark.parametrize(
    "returned", [None, "1.0", float("inf"), {"acc": 1.0}], ids=["none", "string", "inf", "no_score"]
)
def test_non_numeric_rewards_name_the_sample(returned):
    tok = build_tokenizer()
    batch = response_batch(tok, ["46", "7"], WIDTH)
    batch.non_tensor_batch["dataset_index"] = np.array([11, 12], dtype=object)
    with pytest.raises(
        RewardError, match=r"for dataset index 11 \(batch row 0, data_source='verl_lite/arith'\)"
    ):
        NaiveRewardManager(tok, lambda **k: returned)(batch)
    located = NaiveRewardManager(tok, lambda **k: returned)
    located.locate = lambda index: f"train.parquet row {index - 10}"
    with pytest.raises(RewardError, match=r"for train.parquet row 1 \(batch row 0, data_source="):
        located(batch)


def test_a_raising_scorer_names_the_sample_and_keeps_the_cause():
    tok = build_tokenizer()

    def scorer(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "7":
            raise KeyError("boom")
        return 1.0

    with pytest.raises(
        RewardError, match=r"scorer \(.*test_naive.py\) raised KeyError: 'boom' on batch row 1 .*response='7'"
    ) as info:
        NaiveRewardManager(tok, scorer)(response_batch(tok, ["46", "7"], WIDTH))
    assert isinstance(info.value.__cause__, KeyError)


def test_a_reward_function_past_its_timeout_stops_the_batch_naming_the_row():
    """reward_model.timeout bounds a batch: a function stuck in sleep (or a loop) is interrupted."""
    import time

    tok = build_tokenizer()

    def stuck(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "7":
            time.sleep(60)
        return 1.0

    manager = NaiveRewardManager(tok, stuck)
    manager.timeout = 0.5
    start = time.perf_counter()
    with pytest.raises(RewardError, match=r"within reward_model.timeout=0.5 s \(it was scoring batch row 1 "):
        manager(response_batch(tok, ["46", "7"], WIDTH))
    assert time.perf_counter() - start < 10
    assert manager(response_batch(tok, ["46", "46"], WIDTH))[0].sum() == 2.0  # the next batch runs normally

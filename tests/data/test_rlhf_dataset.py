"""The parquet RLHF dataset: chat template, left padding, truncation modes, filtering, bad rows."""

import pandas as pd
import pytest
import torch

from verl_lite.data.rlhf_dataset import EpochSampler, PromptSpec, RLHFDataset
from verl_lite.data.tiny_tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def write(tmp_path, contents, name="d.parquet", **extra_cols):
    rows = [
        {
            "data_source": "verl_lite/arith",
            "prompt": [{"role": "user", "content": c}],
            "ability": "math",
            "reward_model": {"ground_truth": "1"},
            "extra_info": {"index": i},
            **extra_cols,
        }
        for i, c in enumerate(contents)
    ]
    path = tmp_path / name
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def chat_len(tok, content):
    text = tok.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )
    return len(tok(text)["input_ids"])


def test_left_padded_batch_ends_with_the_generation_prompt(tmp_path, tok):
    ds = RLHFDataset(write(tmp_path, ["1+2=", "11+22="]), tok, PromptSpec(max_prompt_length=20))
    batch = ds.collate([0, 1])
    ids, mask = batch.batch["input_ids"], batch.batch["attention_mask"]
    assert ids.shape == (2, 20)
    assert mask[0].sum() == chat_len(tok, "1+2=") and mask[0, -1] == 1 and mask[0, 0] == 0
    assert tok.decode(ids[1][mask[1].bool()]).endswith("<|im_start|>assistant\n")
    assert batch.batch["position_ids"][0, -1] == mask[0].sum() - 1
    assert list(batch.non_tensor_batch["data_source"]) == ["verl_lite/arith"] * 2
    assert batch.non_tensor_batch["reward_model"][1]["ground_truth"] == "1"


def test_truncation_modes(tmp_path, tok):
    path = write(tmp_path, ["1+" * 20 + "1="])
    n = chat_len(tok, "1+" * 20 + "1=")
    with pytest.raises(ValueError, match=f"prompt is {n} tokens, over data.max_prompt_length=16"):
        RLHFDataset(path, tok, PromptSpec(max_prompt_length=16, truncation="error"))
    left = RLHFDataset(path, tok, PromptSpec(max_prompt_length=16, truncation="left"))
    right = RLHFDataset(path, tok, PromptSpec(max_prompt_length=16, truncation="right"))
    assert tok.decode(left.prompts[0]).endswith("assistant\n") and len(left.prompts[0]) == 16
    assert tok.decode(right.prompts[0]).startswith("<|im_start|>user") and len(right.prompts[0]) == 16


def test_filter_overlong_prompts_drops_and_counts(tmp_path, tok):
    ds = RLHFDataset(
        write(tmp_path, ["1+2=", "1+" * 20 + "1=", "3+4="]),
        tok,
        PromptSpec(max_prompt_length=16, filter_overlong_prompts=True),
    )
    assert len(ds) == 2 and ds.num_filtered == 1


def test_bad_rows_and_columns_are_named(tmp_path, tok):
    with pytest.raises(ValueError, match="row 1: column 'prompt' holds an empty prompt"):
        RLHFDataset(write(tmp_path, ["1+2=", "  "]), tok, PromptSpec())
    with pytest.raises(ValueError, match="no column 'question'"):
        RLHFDataset(write(tmp_path, ["1+2="]), tok, PromptSpec(prompt_key="question"))
    with pytest.raises(ValueError, match="cannot read parquet file"):
        RLHFDataset(str(tmp_path / "missing.parquet"), tok, PromptSpec())


def test_sampler_is_seeded_reshuffles_per_epoch_and_resumes():
    s = EpochSampler(10, 3, shuffle=True, seed=7)
    epoch0 = list(s.epoch_batches())
    epoch1 = list(s.epoch_batches())
    assert len(epoch0) == 3 and all(len(b) == 3 for b in epoch0)  # drop_last
    assert epoch0 != epoch1
    again = EpochSampler(10, 3, shuffle=True, seed=7)
    assert list(again.epoch_batches()) == epoch0
    resumed = EpochSampler(10, 3, shuffle=True, seed=7)
    it = resumed.epoch_batches()
    first = next(it)
    state = resumed.state_dict()
    fresh = EpochSampler(10, 3, shuffle=True, seed=7)
    fresh.load_state_dict(state)
    assert [first, *fresh.epoch_batches()] == epoch0
    assert torch.equal(torch.tensor(sorted(sum(epoch0, []))), torch.tensor(sorted(sum(epoch0, []))))


def test_sampler_refuses_a_position_beyond_its_data():
    """A checkpoint of a larger dataset: its offset would end this epoch at once, skipping the rest."""
    s = EpochSampler(10, 3, shuffle=False, seed=None, drop_last=False)
    s.load_state_dict({"epoch": 0, "offset": 12})  # after the last (short) batch: the epoch's end
    assert list(s.epoch_batches()) == [] and s.state_dict() == {"epoch": 1, "offset": 0}
    with pytest.raises(ValueError) as info:
        s.load_state_dict({"epoch": 2, "offset": 30})
    assert str(info.value) == (
        "the checkpoint's sampler position (epoch 2, offset 30) is outside this run's training data "
        "(10 prompts): it was saved with other data.train_files; resume with the data it was saved with, "
        "or start afresh (trainer.resume_mode=disable)"
    )
    assert s.state_dict() == {"epoch": 1, "offset": 0}, "a refused position leaves the sampler as it was"


def _write_rows(tmp_path, rows, name="bad.parquet"):
    path = tmp_path / name
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def _row(**over):
    row = {
        "data_source": "verl_lite/arith",
        "prompt": [{"role": "user", "content": "1+2="}],
        "reward_model": {"ground_truth": "3"},
    }
    return row | over


@pytest.mark.parametrize(
    "bad, match",
    [
        (
            {"prompt": "1+2="},
            r"bad.parquet row 0: column 'prompt' must be a list of chat messages, got '1\+2='",
        ),
        (
            {"prompt": [{"role": "user"}]},
            r"row 1: column 'prompt' holds \{'role': 'user'.*not a \{role, content\}",
        ),
        ({"prompt": []}, "row 1: column 'prompt' holds no messages"),
        (
            {"reward_model": {"style": "rule"}},
            r"row 1 \(data_source='verl_lite/arith'\): no reward_model.ground_truth",
        ),
        ({"data_source": None}, "row 1: column 'data_source' must name the data source, got (None|nan)"),
    ],
    ids=["prompt_is_a_string", "message_without_content", "no_messages", "no_ground_truth", "no_data_source"],
)
def test_malformed_rows_are_named_by_file_row_and_key(tmp_path, tok, bad, match):
    # parquet keeps one type per column: a string prompt column holds only strings
    rows = [_row(**bad)] if isinstance(bad.get("prompt"), str) else [_row(), _row(**bad)]
    path = _write_rows(tmp_path, rows)
    with pytest.raises(ValueError, match=match):
        RLHFDataset(path, tok, PromptSpec())


def test_missing_reward_model_column_and_rows_counted_per_file(tmp_path, tok):
    no_column = _write_rows(tmp_path, [{k: v for k, v in _row().items() if k != "reward_model"}])
    with pytest.raises(ValueError, match="bad.parquet row 0 .*no reward_model.ground_truth"):
        RLHFDataset(no_column, tok, PromptSpec())
    assert len(RLHFDataset(no_column, tok, PromptSpec(require_ground_truth=False))) == 1
    good = _write_rows(tmp_path, [_row(), _row()], name="good.parquet")
    bad = _write_rows(
        tmp_path, [_row(), _row(prompt=[{"role": "user", "content": " "}])], name="second.parquet"
    )
    with pytest.raises(ValueError, match="second.parquet row 1: column 'prompt' holds an empty prompt"):
        RLHFDataset([good, bad], tok, PromptSpec())


def test_max_samples_takes_the_first_rows_or_a_seeded_random_subset(tmp_path, tok):
    """verl's data.train_max_samples / val_max_samples: the first rows, or with data.shuffle a
    random subset drawn with data.seed."""
    path = write(tmp_path, [f"{i}+1=" for i in range(10)])
    first = RLHFDataset(path, tok, PromptSpec(max_samples=3))
    assert [r["extra_info"]["index"] for r in first.rows] == [0, 1, 2]
    picks = [
        [
            r["extra_info"]["index"]
            for r in RLHFDataset(path, tok, PromptSpec(max_samples=4, shuffle=True, seed=s)).rows
        ]
        for s in (1, 1, 2)
    ]
    assert picks[0] == picks[1] != picks[2] and len(set(picks[0])) == 4 and picks[0] != [0, 1, 2, 3]
    assert (
        len(RLHFDataset(path, tok, PromptSpec(max_samples=-1)))
        == len(RLHFDataset(path, tok, PromptSpec(max_samples=50)))
        == 10
    )


def test_apply_chat_template_kwargs_reach_the_template(tmp_path, tok):
    """verl's data.apply_chat_template_kwargs are passed to the chat template (e.g. enable_thinking)."""
    path = write(tmp_path, ["1+2="])
    templated = build_tokenizer()
    templated.chat_template = (
        "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if think %}=?{% endif %}"
    )
    plain = RLHFDataset(path, templated, PromptSpec(max_prompt_length=20))
    thinking = RLHFDataset(
        path, templated, PromptSpec(max_prompt_length=20, chat_template_kwargs={"think": True})
    )
    assert templated.decode(thinking.prompts[0]) == templated.decode(plain.prompts[0]) + "=?"


def test_batched_tokenization_gives_each_rows_own_tokens_across_chunks(tmp_path, tok, monkeypatch):
    """Rows are tokenized in batch calls (TOKENIZE_CHUNK rows each): every prompt is the ids its own
    text gives alone, in file order, across chunk boundaries."""
    import verl_lite.data.rlhf_dataset as rlhf

    monkeypatch.setattr(rlhf, "TOKENIZE_CHUNK", 3)
    contents = [f"{i}+{i * 7}=" for i in range(8)]
    ds = RLHFDataset(write(tmp_path, contents), tok, PromptSpec(max_prompt_length=64))
    alone = [
        tok(
            tok.apply_chat_template(
                [{"role": "user", "content": c}], add_generation_prompt=True, tokenize=False
            ),
            add_special_tokens=False,
        )["input_ids"]
        for c in contents
    ]
    assert ds.prompts == alone and [r["extra_info"]["index"] for r in ds.rows] == list(range(8))


@pytest.mark.parametrize("chunk", [2, 4096])
def test_the_first_bad_row_is_named_as_a_row_by_row_check_names_it(tmp_path, tok, monkeypatch, chunk):
    """Row 1 is too long for truncation=error and row 3 holds no messages: row 1 is named (a batch
    that read every row's messages first would name row 3), within one chunk and across chunks."""
    import verl_lite.data.rlhf_dataset as rlhf

    monkeypatch.setattr(rlhf, "TOKENIZE_CHUNK", chunk)

    def rows(second):
        prompts = [[{"role": "user", "content": c}] for c in ["1+1=", second, "2+2="]] + [[]]
        path = tmp_path / "bad.parquet"
        pd.DataFrame(
            [
                {"data_source": "verl_lite/arith", "prompt": p, "reward_model": {"ground_truth": "1"}}
                for p in prompts
            ]
        ).to_parquet(path)
        return str(path)

    spec = PromptSpec(max_prompt_length=20, truncation="error")
    with pytest.raises(ValueError, match=r"row 1: prompt is \d+ tokens, over data.max_prompt_length=20"):
        RLHFDataset(rows("1+" * 40 + "1="), tok, spec)
    with pytest.raises(ValueError, match="row 3: column 'prompt' holds no messages"):
        RLHFDataset(rows("1+1="), tok, spec)

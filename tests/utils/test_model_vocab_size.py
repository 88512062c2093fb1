"""The vocabulary a multi-turn rollout checks returned ids against: the model config's vocab_size
(which vLLM samples over, padded past the tokenizer as Qwen2.5's is), not the tokenizer's length."""

import json
from pathlib import Path

from transformers import AutoTokenizer

from tests.helpers.configs import tiny_model
from tests.helpers.models import make_tiny_model_dir
from verl_lite.utils.hf_model import model_vocab_size


def test_a_config_vocab_padded_past_the_tokenizer_is_the_models_vocabulary(tmp_path):
    path = make_tiny_model_dir(str(tmp_path / "model"))
    tok = AutoTokenizer.from_pretrained(path)
    config_file = Path(path) / "config.json"
    config = json.loads(config_file.read_text())
    config["vocab_size"] = len(tok) + 64  # padded, as Qwen2.5's 151936 is past its 151665
    config_file.write_text(json.dumps(config))
    assert model_vocab_size(tiny_model(path), tok) == len(tok) + 64


def test_a_tokenizer_longer_than_the_config_counts_its_own_ids(tmp_path):
    path = make_tiny_model_dir(str(tmp_path / "model"))
    tok = AutoTokenizer.from_pretrained(path)
    config_file = Path(path) / "config.json"
    config = json.loads(config_file.read_text())
    config["vocab_size"] = len(tok) - 5
    config_file.write_text(json.dumps(config))
    assert model_vocab_size(tiny_model(path), tok) == len(tok)

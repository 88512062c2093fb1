"""Model folder checks from file headers and sizes: sharded indexes, extra bytes, a tokenizer's vocab."""

import json
import shutil

import torch
from safetensors.torch import save_file

from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.utils.model_files import safetensors_problem, tokenizer_problems, weight_problems


def _sharded(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    save_file({"a": torch.zeros(4)}, folder / "model-00001-of-00002.safetensors")
    save_file({"b": torch.ones(3, 3)}, folder / "model-00002-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_sharded_weights_every_shard_present_and_whole(tmp_path):
    folder = _sharded(tmp_path)
    assert weight_problems(str(folder), "k") == []
    backup = tmp_path / "shard2"
    shutil.move(folder / "model-00002-of-00002.safetensors", backup)
    [msg] = weight_problems(str(folder), "k")
    assert "lists shards that are missing: ['model-00002-of-00002.safetensors']" in msg
    data = backup.read_bytes()
    (folder / "model-00002-of-00002.safetensors").write_bytes(data + b"junk")
    [msg] = weight_problems(str(folder), "k")
    assert "is longer than its header says" in msg
    (folder / "model-00002-of-00002.safetensors").write_bytes(data[:-5])
    assert "is truncated" in safetensors_problem(str(folder / "model-00002-of-00002.safetensors"))


def test_tokenizer_against_the_model():
    tok = build_tokenizer()
    assert tokenizer_problems(tok, "k", "p", len(tok), "mk") == []
    [msg] = tokenizer_problems(tok, "k", "p", 50, "mk")
    assert f"token ids up to {len(tok) - 1}, beyond the model's vocabulary (mk, vocab_size=50)" in msg
    tok.chat_template = None
    assert "no chat template" in tokenizer_problems(tok, "k", "p", None, "mk")[0]

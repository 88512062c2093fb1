"""verl's model.use_shm (a per-node copy of the model folder in /dev/shm, loaded from there) and
model.custom_chat_template (replaces the tokenizer's template)."""

import os

import pytest
import torch

from tests.helpers.configs import tiny_model
from verl_lite.utils.hf_model import load_causal_lm, load_tokenizer, model_files

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")


def test_use_shm_loads_the_same_weights_from_a_copy_in_dev_shm(tiny_model_dir):
    assert model_files(tiny_model(tiny_model_dir)) == tiny_model_dir
    shm = model_files(tiny_model(tiny_model_dir, use_shm=True))
    assert shm.startswith("/dev/shm/") and sorted(os.listdir(shm)) == sorted(os.listdir(tiny_model_dir))
    assert model_files(tiny_model(tiny_model_dir, use_shm=True)) == shm  # made once, then reused
    a = load_causal_lm(tiny_model(tiny_model_dir), torch.float32).state_dict()
    b = load_causal_lm(tiny_model(tiny_model_dir, use_shm=True), torch.float32).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_custom_chat_template_replaces_the_tokenizers(tiny_model_dir):
    template = "{% for m in messages %}Q: {{ m['content'] }}{% endfor %}"
    tok = load_tokenizer(tiny_model_dir, chat_template=template)
    assert tok.apply_chat_template([{"role": "user", "content": "1+2="}], tokenize=False) == "Q: 1+2="
    assert load_tokenizer(tiny_model_dir).chat_template != template

"""The locally built tokenizer survives transformers' AutoTokenizer (which picks Qwen2Tokenizer)."""

from transformers import AutoTokenizer, Qwen2Config

from verl_lite.data.tiny_tokenizer import EOS, PAD, build_tokenizer

TEXT = "<|im_start|>user\n12+34= a b\n  c!<|im_end|>\n<|im_start|>assistant\n46<|im_end|>"


def test_autotokenizer_in_a_qwen2_folder_gives_the_built_ids(tmp_path):
    built = build_tokenizer()
    built.save_pretrained(tmp_path)
    Qwen2Config(vocab_size=len(built)).save_pretrained(tmp_path)  # the folder says qwen2, as a model's would
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded(TEXT)["input_ids"] == built(TEXT)["input_ids"]
    assert loaded.decode(loaded(TEXT)["input_ids"]) == TEXT  # spaces and newlines survive
    assert (loaded.eos_token, loaded.pad_token) == (EOS, PAD)
    assert loaded.eos_token_id != loaded.pad_token_id


def test_digits_are_single_tokens_and_roles_are_merged():
    tok = build_tokenizer()
    assert len(tok("12345")["input_ids"]) == 5
    assert len(tok("assistant")["input_ids"]) == 1
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "1+2="}], add_generation_prompt=True, tokenize=False
    )
    assert chat == "<|im_start|>user\n1+2=<|im_end|>\n<|im_start|>assistant\n"

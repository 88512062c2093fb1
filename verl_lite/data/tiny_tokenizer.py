"""A character-level tokenizer built locally, that survives transformers' tokenizer auto-selection.

In a folder whose config.json says `qwen2`, transformers 5's AutoTokenizer picks Qwen2Tokenizer and
rebuilds the pipeline from the saved vocab and merges with Qwen2's own byte-level BPE settings,
ignoring the saved pre-tokenizer. A WordLevel or plain-character tokenizer is then silently mangled
(spaces and newlines vanish). So this tokenizer *is* a Qwen2-style byte-level BPE: the byte-level
symbols of printable ASCII and newline as the vocabulary, a few merges (role names), Qwen2's split
regex. Both loaders then give the same ids, which tests/data/test_tiny_tokenizer.py checks.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

# Qwen2's pre-tokenizer split: words, single digits, punctuation runs, whitespace.
SPLIT_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
PAD, BOS, EOS = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
MERGED_WORDS = ("user", "assistant", "system")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _byte_symbols() -> dict[int, str]:
    """GPT-2's byte -> printable-unicode map, which byte-level BPE vocabularies are written in."""
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    )
    symbols, extra = dict(zip(keep, map(chr, keep))), 0
    for b in range(256):
        if b not in symbols:
            symbols[b] = chr(256 + extra)
            extra += 1
    return symbols


def build_tokenizer() -> PreTrainedTokenizerFast:
    byte_sym = _byte_symbols()
    vocab = {tok: i for i, tok in enumerate([PAD, BOS, EOS])}
    for b in [*range(32, 127), 10]:
        vocab[byte_sym[b]] = len(vocab)
    merges = []
    for word in MERGED_WORDS:
        prefix = word[0]
        for ch in word[1:]:
            merges.append((prefix, ch))
            prefix += ch
            vocab.setdefault(prefix, len(vocab))
    tok = Tokenizer(
        models.BPE(vocab=vocab, merges=merges, unk_token=None, fuse_unk=False, byte_fallback=False)
    )
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([PAD, BOS, EOS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD)
    fast.chat_template = CHAT_TEMPLATE
    return fast

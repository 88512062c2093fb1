"""The weight-sync plumbing of the vLLM rollout that needs no engine: buckets and the tied head."""

import torch

from verl_lite.rollout.vllm_rollout import iter_buckets, with_tied_lm_head


def test_buckets_gather_ahead_by_at_most_one_bucket():
    pulled = []

    def source():  # 4-byte float32 tensors of 1, 2, 3, 4, 5 elements
        for i in range(1, 6):
            pulled.append(i)
            yield f"w{i}", torch.zeros(i)

    stats = {"bytes": 0, "num_buckets": 0}
    out = iter_buckets(source(), bucket_bytes=12, stats=stats)  # buckets: [1, 2] [3] [4] [5]
    assert next(out)[0] == "w1" and pulled == [1, 2, 3], "the first bucket is full once w3 would overflow it"
    assert [name for name, _ in out] == ["w2", "w3", "w4", "w5"]
    assert stats == {"bytes": 4 * 15, "num_buckets": 4}


def test_tied_head_is_sent_as_the_embedding():
    emb, norm = torch.ones(3, 2), torch.zeros(2)
    out = list(with_tied_lm_head([("model.embed_tokens.weight", emb), ("model.norm.weight", norm)]))
    assert [n for n, _ in out] == ["model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"]
    assert out[1][1] is emb

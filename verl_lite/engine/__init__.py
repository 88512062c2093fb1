"""The FSDP2 engine: builds, shards, runs and updates a model on one data-parallel rank.

The engine is the only place that knows about FSDP2 and offload (parallelize.py is the only caller
of fully_shard). It takes tensors, never DataProto; the workers adapt between the two.
"""

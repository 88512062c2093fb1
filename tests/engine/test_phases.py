"""The engine's phase contract: what holds whenever no phase runs.

Between phases every FSDP unit is resharded (even one built with reshard_after_forward=False that
only ran forwards), cached device blocks are handed back (the release is a no-op on a CPU-only
machine, so here its calls are counted), and under param_offload each sharded param's storage is
freed with its bytes held in the engine's host buffer. A role that idles beside others on a GPU
(critic, reward model) is built with its params and optimizer state on the host.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor

from tests.helpers.configs import fp32_fsdp, tiny_model
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.engine import fsdp_engine
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.engine.mesh import build_layout
from verl_lite.workers.actor import compute_log_prob


def _storage(engine) -> list[int]:
    return [p.to_local().untyped_storage().nbytes() for p in engine.module.parameters()]


def _phases(rank, world, model_dir):
    releases = []
    real = fsdp_engine.dev.empty_cache
    fsdp_engine.dev.empty_cache = lambda: (releases.append(1), real())
    batch = make_ppo_batch(vocab=110, bs=4, seed=1)
    out = {}
    for name, fsdp in {
        "no_reshard": fp32_fsdp(reshard_after_forward=False),
        "param_offload": fp32_fsdp(param_offload=True),
    }.items():
        engine = FSDPEngine(tiny_model(model_dir), fsdp, build_layout("cpu"), role="ref")
        del releases[:]
        before = _storage(engine)
        with engine.phase("probe"):
            inside = _storage(engine)
        logps = [
            compute_log_prob(engine, batch, micro_size=2, max_token_len=None, temperature=1.0, phase="lp")
            for _ in range(2)
        ]
        sharded_after = all(isinstance(p, DTensor) for p in engine.module.parameters())
        out[name] = before, inside, _storage(engine), sharded_after, len(releases), logps
    fsdp_engine.dev.empty_cache = real
    return out


def test_between_phases_units_are_resharded_blocks_released_and_offloaded_params_freed(tiny_model_dir):
    for rank_out in run_ranks(_phases, 2, tiny_model_dir):
        before, inside, after, sharded, releases, logps = rank_out["no_reshard"]
        assert sharded, "a forward-only phase must not leave gathered params registered"
        assert releases == 3, "one release per phase (probe + two log-prob phases)"
        assert before == inside == after and min(before) > 0
        before, inside, after, sharded, releases, offloaded_logps = rank_out["param_offload"]
        assert sharded and releases == 3
        assert max(before) == 0 and max(after) == 0, "offloaded params hold no storage between phases"
        assert min(inside) > 0, "inside a phase they are back"
        for a, b in zip(logps, offloaded_logps):
            assert torch.equal(a, b), "offloading must not change log-probs"

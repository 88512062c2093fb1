"""Manual offload's overlapped copies (engine/offload.py): the order they are queued in, the bytes they
count, and that they never make the host wait for the device.

On CPU the copies are synchronous (there are no side streams), so what runs here is the order of
operations the GPU path queues -- each unit's params in forward order at a phase's start, the next
unit's optimizer moments in before a unit steps and its own out after -- on a real FSDP2 engine (2 gloo
ranks, the tiny model), with the bytes of every copy; exactness against no offload is
tests/engine/test_offload_invariance.py's. The overlap's speed is the param+optimizer offload row of
scripts/gpu_check.sh (tokens/s against no offload), not yet measured: the one lent H200's time ran out
before its no-offload row (docs/performance.md, GPU results).
"""

from __future__ import annotations

import pytest

from tests.helpers.configs import fp32_fsdp, tiny_actor, tiny_model
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.engine.mesh import build_layout
from verl_lite.engine.offload import step_schedule
from verl_lite.utils import device as dev
from verl_lite.workers.actor import PPOActor


@pytest.mark.parametrize("units", [1, 2, 3, 7])
def test_the_step_brings_the_next_unit_in_before_a_unit_steps_and_holds_at_most_three(units):
    ops = step_schedule(units)
    assert sorted(ops) == sorted((op, i) for i in range(units) for op in ("in", "step", "out"))
    at = {op: i for i, op in enumerate(ops)}
    for i in range(units):
        assert at["in", i] < at["step", i] < at["out", i]
        if i + 1 < units:
            assert at["in", i + 1] < at["step", i], "the next unit arrives while this one steps"
    on_device, most = set(), 0
    for op, i in ops:
        on_device = on_device | {i} if op == "in" else on_device - ({i} if op == "out" else set())
        most = max(most, len(on_device) + 1)  # + the unit whose copy out may still run
    assert most <= 3, "the memory model counts three units' moments"


def _update(rank, world, model_dir, offload: bool):
    syncs = []
    real = dev.synchronize
    dev.synchronize = lambda: (syncs.append(1), real())[1]  # the real wait, counted
    fsdp = fp32_fsdp(param_offload=offload, optimizer_offload=offload)
    cfg = tiny_actor(ppo_micro_batch_size_per_gpu=2)
    engine = FSDPEngine(tiny_model(model_dir), fsdp, build_layout("cpu"), role="actor", optim_cfg=cfg.optim)
    actor = PPOActor(engine, cfg, response_length=5, temperature=1.0)
    batch = make_ppo_batch(vocab=110, bs=8, seed=5)
    actor.update(batch, mini_size=8, micro_size=2)  # the first step creates the moments
    engine.pop_metrics()
    trace = engine.offload.trace = [] if offload else None
    del syncs[:]
    actor.update(batch, mini_size=8, micro_size=2)
    moved = engine.pop_metrics()[1]
    dev.synchronize = real
    if not offload:
        return len(syncs), None, None, None
    o = engine.offload
    sizes = {
        "params": sum(o.param_home.sizes),
        "state": sum(sum(h.sizes) for h in o.optim_homes.values()),
        "units": len(o.unit_storages),
        "chunks": len(o.param_chunks),
    }
    return len(syncs), trace, moved["update"], sizes


def test_copies_are_queued_in_order_counted_in_full_and_never_wait(tiny_model_dir):
    plain = run_ranks(_update, 2, tiny_model_dir, False)
    for (syncs, trace, update, sizes), (plain_syncs, *_) in zip(
        run_ranks(_update, 2, tiny_model_dir, True), plain
    ):
        assert syncs == plain_syncs, "offloading adds no device-wide wait (only the phase's own)"
        params_in = [t for t in trace if t[0] == "params_in"]
        assert params_in == [("params_in", u) for u in range(sizes["units"])], "root, then layers in order"
        assert trace[-1] == ("params_out",) and trace.count(("params_out",)) == 1
        step = [t for t in trace if t[0] in ("state_in", "step", "state_out")]
        names = {"in": "state_in", "out": "state_out", "step": "step"}
        assert step == [(names[op], i) for op, i in step_schedule(sizes["chunks"])]
        assert update.h2d_bytes == update.d2h_bytes == sizes["params"] + sizes["state"]
        assert update.h2d_s > 0 and update.d2h_s > 0, "every copy is timed"

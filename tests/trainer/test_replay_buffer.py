"""The replay buffer's rules, verl 0.9.1's ReplayBufferAsync: oldest finished groups first, `drop`
evicts finished groups past max_off_policy_threshold, `wait` holds the batch for in-flight groups at
it, a checkpoint keeps finished groups whole and the others as prompts."""

from __future__ import annotations

from verl_lite.trainer.replay_buffer import ReplayBuffer


def _buffer(strategy="drop", threshold=2, n=2) -> ReplayBuffer:
    return ReplayBuffer(n, threshold, strategy)


def _finish(buffer, uid, version=0, tokens=(5, 2)):
    group = next(g for g in buffer.groups if g.uid == uid)
    for t in group.trajectories:
        t.extend(list(tokens), [-0.5] * len(tokens), version, done=True)


def test_a_batch_is_the_oldest_finished_groups():
    b = _buffer()
    b.add(["a", "b"], [0, 1], [[1], [2]], step=1)
    b.add(["c", "d"], [2, 3], [[3], [4]], step=2)
    for uid in ("d", "c", "b"):
        _finish(b, uid)
    assert b.ready(step=2, batch_size=3) and not b.ready(step=2, batch_size=4)
    assert [g.uid for g in b.take(2)] == ["b", "c"]  # b submitted at step 1, then c and d at step 2
    assert [g.uid for g in b.groups] == ["a", "d"]


def test_drop_evicts_finished_groups_past_the_threshold_only():
    b = _buffer(threshold=2)
    b.add(["old", "old_running"], [0, 1], [[1], [2]], step=1)
    b.add(["new"], [2], [[3]], step=2)
    _finish(b, "old")
    _finish(b, "new")
    assert b.evict_stale(step=2) == []  # age 2 is within the threshold
    stale = b.evict_stale(step=3)  # age 3 > 2: evicted, the unfinished one stays (it may finish)
    assert [g.uid for g in stale] == ["old"] and stale[0].age(3) == 3
    assert [g.uid for g in b.groups] == ["old_running", "new"]


def test_wait_holds_the_batch_for_in_flight_groups_at_the_threshold():
    b = _buffer(strategy="wait", threshold=2)
    b.add(["old"], [0], [[1]], step=1)
    b.add(["x", "y"], [1, 2], [[2], [3]], step=2)
    _finish(b, "x")
    _finish(b, "y")
    assert b.ready(step=1, batch_size=2)  # "old" is at age 1 < 2
    assert not b.ready(step=2, batch_size=2)  # "old" reached the threshold unfinished: it must finish first
    assert b.evict_stale(step=9) == []  # wait never evicts
    _finish(b, "old")
    assert b.ready(step=2, batch_size=2) and [g.uid for g in b.take(2)] == ["old", "x"]


def test_a_trajectory_records_the_versions_its_tokens_came_from():
    b = _buffer(n=1)
    b.add(["a"], [0], [[1]], step=1)
    (t,) = b.groups[0].trajectories
    t.extend([7, 8], [-1.0, -2.0], version=0, done=False)
    t.extend([], [], version=1, done=False)  # a round that gave it nothing leaves its versions
    t.extend([9], [-3.0], version=2, done=True)
    assert t.tokens == [7, 8, 9] and t.log_probs == [-1.0, -2.0, -3.0] and t.versions == (0, 2)


def test_a_checkpoint_keeps_finished_groups_and_restarts_the_others_from_their_prompts():
    b = _buffer(n=2)
    b.add(["done", "partial"], [4, 5], [[1, 2], [3]], step=3)
    _finish(b, "done", version=2, tokens=(6, 7, 2))
    b.groups[1].trajectories[0].extend([9], [-0.1], version=2, done=False)
    restored = _buffer(n=2)
    restored.load_state_dict(b.state_dict())
    done, partial = restored.groups
    assert (done.uid, done.index, done.submitted, done.prompt_ids) == ("done", 4, 3, [1, 2])
    assert done.finished and [t.tokens for t in done.trajectories] == [[6, 7, 2]] * 2
    assert done.trajectories[0].versions == (2, 2)
    assert (partial.uid, partial.prompt_ids) == ("partial", [3]) and not partial.finished
    assert all(t.tokens == [] and t.versions is None for t in partial.trajectories)


def test_a_group_whose_loop_failed_is_never_sampled_nor_checkpointed_whole():
    """verl 0.9.1's failed session (agent_loop/rounds.py reports it): once its other trajectories
    ended the group is `failed`, not finished: no batch takes it, `drop` leaves it to the driver's
    eviction and refill (ColocateAsync._refill_failed), a checkpoint keeps its prompt only."""
    b = _buffer(n=2)
    b.add(["ok", "bad"], [0, 1], [[1], [2]], step=1)
    _finish(b, "ok")
    bad = b.groups[1]
    bad.trajectories[0].failed, bad.trajectories[0].done = "agent loop 'x' raised RuntimeError: down", True
    assert not bad.failed and not bad.finished  # its other trajectory still runs
    _finish(b, "bad")
    bad.trajectories[0].failed = "agent loop 'x' raised RuntimeError: down"  # _finish marked it done again
    assert bad.failed and not bad.finished
    ok = b.groups[0]
    assert not b.ready(step=1, batch_size=2) and b.evict_stale(step=5) == [ok]
    assert [g.uid for g in b.groups] == ["bad"]
    restored = _buffer(n=2)
    restored.load_state_dict(b.state_dict())
    assert restored.groups[0].uid == "bad" and not restored.groups[0].failed
    assert all(not t.done and t.tokens == [] for t in restored.groups[0].trajectories)
    b.remove([bad])
    assert b.groups == []

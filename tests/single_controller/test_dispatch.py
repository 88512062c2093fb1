"""A worker group of 2 Ray actors splits a DataProto by rank and gathers results in order."""

import os
import time

import pytest
import torch

from verl_lite.protocol import DataProto
from verl_lite.single_controller import (
    Dispatch,
    RayResourcePool,
    RayWorkerGroup,
    Worker,
    WorkerError,
    register,
)
from verl_lite.single_controller.decorator import collect_results, dispatch_args
from verl_lite.utils import import_gc


class EchoWorker(Worker):
    def __init__(self, offset: float):
        super().__init__()
        self.offset = offset

    @register(Dispatch.DP_COMPUTE_PROTO)
    def transform(self, data: DataProto) -> DataProto:
        x = data.batch["x"]
        rank = torch.full_like(x, self.rank)
        return DataProto.from_dict({"y": x + self.offset, "rank": rank}, {"tag": [f"r{self.rank}"] * len(x)})

    @register(Dispatch.DP_COMPUTE_PROTO, mesh="shared")
    def transform_shared(self, data: DataProto) -> DataProto:
        """Like transform, for a mesh whose ranks may share their data (sequence parallelism)."""
        return self.transform(data)

    @register(Dispatch.ONE_TO_ALL)
    def gc_state(self) -> tuple[bool, bool, str | None, bool]:
        """(imports ran paused, collector on, the pause variable, the collector in a process this
        worker starts)."""
        import gc
        import subprocess
        import sys

        child = subprocess.run(
            [sys.executable, "-c", "import gc, verl_lite; print(gc.isenabled())"],
            capture_output=True,
            text=True,
            check=True,
        )
        state = gc.isenabled(), os.environ.get(import_gc.PAUSE_ENV), child.stdout.strip() == "True"
        return (import_gc.paused_for_imports, *state)

    @register(Dispatch.ONE_TO_ALL)
    def log_call(self, tag: str, seconds: float) -> list[str]:
        """After `seconds`, append `tag` to this worker's call log and return the log."""
        time.sleep(seconds)
        self.calls = [*getattr(self, "calls", []), tag]
        return self.calls

    @register(Dispatch.ONE_TO_ALL)
    def whoami(self) -> tuple[int, int, str]:
        return self.rank, self.world_size, os.environ.get("MASTER_PORT", "")

    @register(Dispatch.ONE_TO_ALL)
    def mark_exit(self, folder: str) -> None:
        """Write a file when this process exits normally (atexit does not run when it is killed)."""
        import atexit

        atexit.register(lambda: open(os.path.join(folder, f"exited-{self.rank}"), "w").close())

    @register(Dispatch.ONE_PER_RANK)
    def own_items(self, items: list[int]) -> tuple[int, list[int]]:
        return self.rank, items

    @register(Dispatch.ONE_TO_ALL)
    def fail_on(self, rank: int) -> int:
        if self.rank == rank:
            raise ValueError("boom")
        return self.rank


@pytest.fixture(scope="module")
def group(ray_local):
    pool = RayResourcePool(nnodes=1, n_workers_per_node=2, use_gpu=False)
    wg = RayWorkerGroup(pool, EchoWorker, 100.0, name="echo")
    yield wg
    wg.shutdown()
    pool.release()


def test_dp_dispatch_splits_by_rank_and_gathers_in_order(group):
    data = DataProto.from_dict({"x": torch.arange(6).float()})
    out = group.transform(data)
    assert out.batch["y"].tolist() == [100, 101, 102, 103, 104, 105]
    assert out.batch["rank"].tolist() == [0, 0, 0, 1, 1, 1]
    assert list(out.non_tensor_batch["tag"]) == ["r0"] * 3 + ["r1"] * 3


def test_submitted_calls_run_in_submission_order_and_gather_later(group):
    data = DataProto.from_dict({"x": torch.arange(6).float()})
    first = group.submit("log_call", "slow", 0.3)
    second = group.submit("log_call", "fast", 0.0)  # queued behind the slow one on every worker
    third = group.submit("transform", data)
    assert [log[-2:] for log in second.result()] == [["slow", "fast"]] * 2
    assert [log[-1] for log in first.result()] == ["slow", "slow"], "each result is its own call's"
    assert third.result().batch["y"].tolist() == group.transform(data).batch["y"].tolist()


def test_one_per_rank_sends_each_rank_only_its_item(group):
    assert group.own_items([[1, 2], [3]]) == [(0, [1, 2]), (1, [3])]
    with pytest.raises(TypeError, match="one list of 2 items, one per rank"):
        dispatch_args(Dispatch.ONE_PER_RANK, 2, ([[1]],), {})


def test_one_to_all_reaches_every_rank_with_a_shared_rendezvous(group):
    results = group.whoami()
    assert [r[:2] for r in results] == [(0, 2), (1, 2)]
    assert results[0][2] and results[0][2] == results[1][2]


def test_workers_collect_garbage_once_their_imports_are_done(group):
    """The group pauses a worker's collector for its imports (utils/import_gc.py); Worker.__init__
    resumes it and removes the variable, so a process the worker starts collects as usual."""
    assert group.gc_state() == [(True, True, None, True)] * 2


def test_worker_error_names_rank_and_method(group):
    with pytest.raises(WorkerError, match="echo rank 1 raised in fail_on"):
        group.fail_on(1)


def test_uneven_batch_is_refused_before_dispatch(group):
    with pytest.raises(ValueError, match="pad_to_divisor"):
        group.transform(DataProto.from_dict({"x": torch.arange(5).float()}))


def test_ranks_sharing_data_get_the_same_chunk_and_one_result_counts():
    data = DataProto.from_dict({"x": torch.arange(8).float()})
    per_rank = dispatch_args(Dispatch.DP_COMPUTE_PROTO, 4, (data,), {}, ranks_per_shard=2)
    chunks = [args[0].batch["x"].tolist() for args, _ in per_rank]
    assert chunks == [[0, 1, 2, 3], [0, 1, 2, 3], [4, 5, 6, 7], [4, 5, 6, 7]]
    results = [DataProto.from_dict({"r": torch.full((4,), float(r))}) for r in range(4)]
    assert collect_results(Dispatch.DP_COMPUTE_PROTO, results, 2).batch["r"].tolist() == [0] * 4 + [2] * 4


def test_a_mesh_data_layout_shares_rows_within_groups(group):
    data = DataProto.from_dict({"x": torch.arange(6).float()})
    assert group.transform_shared(data).batch["rank"].tolist() == [0, 0, 0, 1, 1, 1], (
        "one rank per row by default"
    )
    group.set_data_layout("shared", 2)
    try:
        out = group.transform_shared(data)
        assert out.batch["y"].tolist() == [100, 101, 102, 103, 104, 105]
        assert out.batch["rank"].tolist() == [0] * 6, "both ranks got every row; rank 0's result is kept"
        assert group.transform(data).batch["rank"].tolist() == [0, 0, 0, 1, 1, 1], "other methods unchanged"
    finally:
        group.set_data_layout("shared", 1)

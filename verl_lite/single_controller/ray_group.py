"""Resource pools (placement groups) and worker groups of Ray actors.

A RayResourcePool reserves one placement group per node, `n_workers_per_node` bundles each
(STRICT_PACK: a node's workers on one node), so a group of nnodes x n_gpus_per_node workers lands
the way a torchrun launch would. Without GPUs each bundle holds a share of the node's CPUs.

Colocation: several worker groups (actor+rollout+ref, critic, reward model) can share one pool, as
in verl. The pool is built with `max_colocate_count` = the number of groups, and each group's actor
on a bundle asks for 1/max_colocate_count of it (fractional CPUs, or a fraction of the GPU), so the
roles of one rank sit in separate processes on the same device and take turns, driven step by step
by the driver. Each group has its own process group (its own rendezvous), so their collectives
never mix.

A RayWorkerGroup starts one actor per bundle, all at once (each process imports torch and the
engine, seconds each: started one after another, a group of N ranks took N times that to come up),
and returns without waiting for them, so the trainer starts every group's processes before it
builds the first group's model. Before the group's first call, rank 0's rendezvous address (asked
for at start) is handed to every rank. Every method the worker class marks with
`@register` is bound onto the group, so `group.update_actor(batch)` dispatches, runs on all ranks
in parallel, and gathers; `group.submit("update_actor", batch)` dispatches and returns at once (the
driver can queue the next call behind it and gather both later). A failure names the worker, the
rank and the method.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError, RuntimeEnvSetupError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from verl_lite.single_controller.decorator import DISPATCH_ATTR, MESH_ATTR, collect_results, dispatch_args
from verl_lite.utils import device as dev
from verl_lite.utils import host_heap, import_gc, logs


class WorkerError(RuntimeError):
    """A worker failed (raised or died) while running a group method."""


def runtime_env_reason(error: Exception) -> str:
    """The last line of Ray's runtime_env report that says what failed (pip's or Ray's own error)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith(("File ", "^", "Traceback", "During handling"))]
    return said[-1] if said else "(Ray gave no reason)"


class RayResourcePool:
    def __init__(
        self,
        nnodes: int,
        n_workers_per_node: int,
        use_gpu: bool,
        ready_timeout_s: float = 120.0,
        max_colocate_count: int = 1,
        share_node_with: int = 0,
        what: str = "trainer",
    ):
        """`share_node_with`: workers of another pool on the same nodes (separate_async's rollout
        group beside the trainer's), which a CPU node's share counts in; `what`: the keys that size
        it, for the message (trainer: trainer.nnodes / n_gpus_per_node)."""
        self.nnodes, self.n_workers_per_node, self.use_gpu = nnodes, n_workers_per_node, use_gpu
        self.max_colocate_count = max_colocate_count
        self.cpus_per_node = self._cpus_per_node()
        self.workers_on_node = n_workers_per_node + share_node_with
        self.bundle = dev.ray_worker_resources(self.workers_on_node, self.cpus_per_node, use_gpu)
        self.rollout_pool: RayResourcePool | None = None  # separate_async's rollout group, released with it
        self.placement_groups = [
            placement_group([dict(self.bundle)] * n_workers_per_node, strategy="STRICT_PACK")
            for _ in range(nnodes)
        ]
        try:
            ray.get([pg.ready() for pg in self.placement_groups], timeout=ready_timeout_s)
        except GetTimeoutError as e:
            self.release()
            raise RuntimeError(
                f"Ray could not place {what}.nnodes={nnodes} x {what}.n_gpus_per_node={n_workers_per_node} "
                f"workers of {self.bundle} each within {ready_timeout_s:.0f}s; cluster has "
                f"{ray.cluster_resources()}. Lower {what}.nnodes / {what}.n_gpus_per_node or add nodes."
            ) from e

    @staticmethod
    def _cpus_per_node() -> float:
        alive = [n for n in ray.nodes() if n.get("Alive")]
        return min(n["Resources"].get("CPU", 0.0) for n in alive)

    @property
    def world_size(self) -> int:
        return self.nnodes * self.n_workers_per_node

    def actor_resources(self) -> dict[str, float]:
        """What one group's actor asks of its bundle: an equal share among the colocated groups
        (Ray takes fractions below 1 and whole numbers above, so a larger share is rounded down)."""
        out = {}
        for key, amount in self.bundle.items():
            share = amount / self.max_colocate_count
            out[key] = float(int(share)) if share >= 1 else round(share, 4)
        return out

    def slots(self):
        """(placement group, bundle index) for each rank, node by node."""
        for pg in self.placement_groups:
            for i in range(self.n_workers_per_node):
                yield pg, i

    def memory_gb(self) -> list[tuple[float, float]]:
        """Each slot's (device memory, its node's available host memory) in GiB, measured by a short
        task in the slot, before any worker exists (trainer.auto_offload plans with both)."""
        probe = ray.remote(dev.slot_memory_gb)
        futures = [
            probe.options(
                num_cpus=self.bundle.get("CPU", 0),
                num_gpus=self.bundle.get("GPU", 0),
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i),
            ).remote()
            for pg, i in self.slots()
        ]
        return ray.get(futures)

    def release(self) -> None:
        for pg in self.placement_groups:
            remove_placement_group(pg)
        self.placement_groups = []
        if self.rollout_pool is not None:
            self.rollout_pool.release()


def run_environ() -> dict[str, str]:
    """The variables a run's workers inherit: the driver's environment and ray_init's
    runtime_env.env_vars (which win there)."""
    job = ray.get_runtime_context().runtime_env.get("env_vars") or {}
    return {**os.environ, **job}


def worker_env(pool: RayResourcePool, environ: dict[str, str]) -> dict[str, str]:
    """The variables every worker of `pool` starts with, beside its rank's. An actor's own env_vars
    win over the job's runtime_env in Ray, so each of these takes the value `environ` (run_environ)
    sets, where it sets one: a run's ray_init.runtime_env.env_vars reach the workers as written."""
    requested = dev.requested_threads(environ)  # OMP_NUM_THREADS, from the shell or the runtime_env
    threads = str(dev.worker_num_threads(pool.workers_on_node, pool.cpus_per_node, pool.use_gpu, requested))
    return {
        "VERL_LITE_NUM_THREADS": threads,
        "OMP_NUM_THREADS": threads,
        "TOKENIZERS_PARALLELISM": environ.get("TOKENIZERS_PARALLELISM", "false"),
        # a CPU worker keeps its freed activations mapped between updates (utils/host_heap.py)
        **({} if pool.use_gpu else host_heap.cpu_worker_env(environ)),
    }


def rank_env(rank: int, world_size: int, n_workers_per_node: int) -> dict[str, str]:
    """The launcher variables of one rank, with torchrun's names and meanings: global RANK and
    WORLD_SIZE, the node's index (NODE_RANK) and its worker count (LOCAL_WORLD_SIZE).

    LOCAL_RANK is left to the worker (Worker.__init__): vLLM and torch read it as the ordinal of
    the process's device among the devices *visible to that process*, and only the worker sees what
    Ray made visible to it (normally one GPU: ordinal 0, whatever the rank's place on its node)."""
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "NODE_RANK": str(rank // n_workers_per_node),
        "LOCAL_WORLD_SIZE": str(n_workers_per_node),
    }


class PendingCall:
    """A group method started on every rank (RayWorkerGroup.submit); `result()` gathers it once."""

    def __init__(self, group: RayWorkerGroup, method: str, mode, ranks_per_shard: int, futures: list):
        self.group, self.method, self.mode, self.shard, self.futures = (
            group,
            method,
            mode,
            ranks_per_shard,
            futures,
        )

    def result(self):
        return collect_results(self.mode, self.group._get_all(self.method, self.futures), self.shard)


class RayWorkerGroup:
    def __init__(self, pool: RayResourcePool, worker_cls: type, *args, name: str = "worker", **kwargs):
        self.pool, self.name = pool, name
        remote_cls = ray.remote(worker_cls)
        slots = list(pool.slots())
        self.workers = []
        self.log_files = [logs.worker_log_path(name, rank) for rank in range(len(slots))]
        self.failed = False  # a method raised or a worker died: shutdown kills at once
        self.submitting = threading.Lock()  # one submitter at a time: the ranks see one call order
        common = worker_env(pool, run_environ())
        for rank, (pg, bundle_index) in enumerate(slots):
            env = {**rank_env(rank, len(slots), pool.n_workers_per_node), **common}
            if self.log_files[rank]:  # the worker's output goes to its file in the run folder
                env[logs.WORKER_LOG_ENV] = self.log_files[rank]
            env[import_gc.PAUSE_ENV] = "1"  # no garbage collection while it imports (utils/import_gc.py)
            share = pool.actor_resources()
            actor = remote_cls.options(
                num_cpus=share.get("CPU", 0),
                num_gpus=share.get("GPU", 0),
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    pg, placement_group_bundle_index=bundle_index
                ),
                runtime_env={"env_vars": env},
                name=None,
            ).remote(*args, **kwargs)
            self.workers.append(actor)
        # rank 0 hosts the rendezvous: it picks the address (on its node) once its process is up
        self._master = self.workers[0].get_master_addr_port.remote() if self.workers else None
        self._bind_methods(worker_cls)

    def _rendezvous(self) -> None:
        """Every rank gets rank 0's address before the group's first call (an actor runs one caller's
        calls in the order they were made): once, waiting for rank 0's process to be up."""
        if self._master is None:
            return
        master = self._get_all("get_master_addr_port", [self._master])[0]
        self._master = None
        self._get_all("set_master_addr_port", [w.set_master_addr_port.remote(*master) for w in self.workers])

    @property
    def world_size(self) -> int:
        return len(self.workers)

    def node_ids(self) -> list[str]:
        """The Ray node id of each rank, in rank order."""
        self._rendezvous()
        return self._get_all("get_node_id", [w.get_node_id.remote() for w in self.workers])

    def set_data_layout(self, mesh: str, ranks_per_shard: int) -> None:
        """Methods registered with `mesh` send each chunk of data to `ranks_per_shard` consecutive
        ranks (a sequence-parallel group) and gather one result per group."""
        if ranks_per_shard < 1 or self.world_size % ranks_per_shard:
            raise ValueError(
                f"{self.name}: {ranks_per_shard} ranks per shard do not divide {self.world_size}"
            )
        self.ranks_per_shard[mesh] = ranks_per_shard

    def _bind_methods(self, worker_cls: type) -> None:
        self.ranks_per_shard: dict[str, int] = {}
        self.registered: dict[str, tuple] = {}  # method name -> (dispatch mode, mesh)
        for method_name, fn in inspect.getmembers(worker_cls, predicate=inspect.isfunction):
            mode, mesh = getattr(fn, DISPATCH_ATTR, None), getattr(fn, MESH_ATTR, None)
            if mode is None:
                continue
            self.registered[method_name] = (mode, mesh)

            def group_method(*args, _name=method_name, **kwargs):
                return self.submit(_name, *args, **kwargs).result()

            setattr(self, method_name, functools.wraps(fn)(group_method))

    def submit(self, method: str, *args, **kwargs) -> PendingCall:
        """Start a registered method on every rank and return at once; `.result()` waits and gathers.
        Each worker runs the calls it gets in the order they were submitted (one caller, an actor
        with one thread), so a second call submitted before the first's result is taken runs right
        after it, without a round trip through the driver in between."""
        self._rendezvous()
        mode, mesh = self.registered[method]
        shard = self.ranks_per_shard.get(mesh, 1)
        per_rank = dispatch_args(mode, self.world_size, args, kwargs, shard)
        with self.submitting:  # two driver threads (separate_async's rollout thread and validation):
            # every rank gets their calls in one order, as the ranks of a TP group must call together
            futures = [getattr(w, method).remote(*a, **kw) for w, (a, kw) in zip(self.workers, per_rank)]
        return PendingCall(self, method, mode, shard, futures)

    def _get_all(self, method: str, futures: list) -> list:
        """Results in rank order; the first failure to arrive is raised at once, naming its rank
        (waiting in rank order could block on a healthy rank stuck in a collective with a dead one)."""
        rank_of = {f: r for r, f in enumerate(futures)}
        results: dict[int, object] = {}  # each result deserialised once, as it arrives
        pending = list(futures)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            rank = rank_of[done[0]]
            try:
                results[rank] = ray.get(done[0])
            except RayTaskError as e:
                self.failed = True
                # a rank that dies makes its peers' collectives fail too, sometimes first: name the
                # dead rank as the cause when one is found among the others
                self._raise_if_one_died(method, pending, rank_of)
                raise WorkerError(f"{self.name} rank {rank} raised in {method}: {e.cause!r}\n{e}") from e
            except RayActorError as e:
                self.failed = True
                raise WorkerError(
                    f"{self.name} rank {rank} died during {method}: {e}{self._log_end(rank)}"
                ) from e
            except RuntimeEnvSetupError as e:  # pip packages that cannot install, ...: Ray's traceback
                self.failed = True
                error = WorkerError(
                    f"ray_kwargs.ray_init.runtime_env: Ray could not set up the environment of {self.name} "
                    f"rank {rank}: {runtime_env_reason(e)}; fix the runtime_env (its pip packages, "
                    "working_dir, ...) or remove it"
                )
                error.detail = f"{error}\n{e}"  # Ray's whole report, for the run's log file
                raise error from e
        return [results[rank] for rank in range(len(futures))]

    def _log_end(self, rank: int) -> str:
        """Where a dead worker's own output is, and its last lines (what it printed before dying)."""
        path = self.log_files[rank]
        if not path:
            return ""
        end = logs.tail(path)
        return f"\n{self.name} rank {rank} log: {path}" + (f"; its last lines:\n{end}" if end else "")

    def _raise_if_one_died(self, method: str, pending: list, rank_of: dict, wait_s: float = 10.0) -> None:
        if not pending:
            return
        done, _ = ray.wait(pending, num_returns=len(pending), timeout=wait_s)
        for future in done:
            try:
                ray.get(future)
            except RayActorError as e:
                rank = rank_of[future]
                raise WorkerError(
                    f"{self.name} rank {rank} died during {method}: {e}{self._log_end(rank)}"
                ) from e
            except RayTaskError:
                pass

    def shutdown(self, grace_s: float = 30.0) -> None:
        """End the workers: first by letting each process exit normally, so libraries release what
        they hold outside it (vLLM's CPU engine leaves its shared-memory files in /dev/shm when
        killed, and the next tensor-parallel run on the machine fails on them); a worker still busy
        after `grace_s` is killed. An exiting process is left to finish: Ray reports the actor dead
        before the process has run its exit handlers, and killing it then would cut them short."""
        if not self.workers:
            return
        if self.failed:  # its ranks may be stuck in a collective with the failed one: no grace
            grace_s = 0.0
        exits = [w.__ray_terminate__.remote() for w in self.workers]
        _, busy = ray.wait(exits, num_returns=len(exits), timeout=grace_s)
        for w, exit_ref in zip(self.workers, exits):
            if exit_ref in busy:
                ray.kill(w)
        if busy:  # a killed actor's call ends (with an error) once Ray has it dead: nothing it ran
            ray.wait(busy, num_returns=len(busy), timeout=10.0)  # writes after shutdown returns
        self.workers = []

"""The machine's start-up steps (registered in verl_lite/preflight.py): the workers fit the nodes
(single_controller/capacity.py), OMP_NUM_THREADS, when set, is a thread count for them, and
ray_init is one Ray takes (runtime_env's env_vars are strings; a run that joins a cluster sets none
of the keys for a Ray it starts). A
local Ray's one node is known before Ray starts; a cluster joined by address is known only once
joined, and is checked then, before any worker starts. Before that, the address must answer:
ray.init waits for a GCS that is not there for minutes (it was seen hanging until killed)."""

from __future__ import annotations

import difflib
import importlib
import json
import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING

from verl_lite.single_controller.capacity import capacity_problems, cluster_nodes, local_node
from verl_lite.utils import device as dev

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig


def joins_cluster(cfg: PPOTrainerConfig) -> bool:
    """Whether ray.init joins a running cluster ("local" starts a Ray of the run's own)."""
    named = cluster_address(cfg)
    return named is not None and named[1] != "local"


PROBE_S = 5.0  # how long a cluster's address has to answer a TCP connection


def cluster_address(cfg: PPOTrainerConfig) -> tuple[str, str] | None:
    """(the key or variable that names it, the address) of the cluster the run joins, or None."""
    if cfg.ray_kwargs.ray_init.address:
        return "ray_kwargs.ray_init.address", cfg.ray_kwargs.ray_init.address
    if os.environ.get("RAY_ADDRESS"):
        return "RAY_ADDRESS", os.environ["RAY_ADDRESS"]
    return None


def _host_port(address: str) -> tuple[str, int] | str:
    """Where to probe `address` ("auto": the cluster `ray start` recorded here), or why not."""
    if address == "auto":
        from ray._private.services import canonicalize_bootstrap_address

        try:
            found = canonicalize_bootstrap_address("auto")
        except Exception as e:  # ConnectionError: no cluster recorded on this machine
            return f"finds no running Ray cluster on this machine ({' '.join(str(e).split())[:200]})"
        if not found:
            return "finds no running Ray cluster on this machine"
        address = found
    client = address.startswith("ray://")
    rest = address.removeprefix("ray://")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        return (host or rest, 10001) if client and rest and not port.isdigit() else "is not host:port"
    return host.strip("[]"), int(port)


def address_problem(cfg: PPOTrainerConfig) -> str | None:
    """The cluster address the run joins does not answer (or cannot), in one line; None if it does."""
    import ray

    named = cluster_address(cfg)
    if named is None or ray.is_initialized():  # connected already: the run uses that connection
        return None
    key, address = named
    if address == "local":  # ray.init starts a new local Ray: there is nothing to reach
        return None
    target = _host_port(address)
    fix = "start the cluster there (`ray start --head`), fix the address, or unset it to start a local Ray"
    if isinstance(target, str):
        return f"{key}={address!r} {target}; {fix}"
    try:
        with socket.create_connection(target, timeout=PROBE_S):
            return None
    except OSError as e:
        why = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        return f"{key}={address!r}: nothing answers at {target[0]}:{target[1]} ({why} within {PROBE_S:.0f} s); {fix}"


RUNTIME_ENV = "ray_kwargs.ray_init.runtime_env"
# ray_init's keys for a Ray the run starts: (their default, how a cluster's nodes set the same)
LOCAL_RAY_ONLY = {
    "num_cpus": (None, "a cluster's nodes offer the CPUs `ray start --num-cpus` gave them"),
    "include_dashboard": (
        False,
        "a cluster's head starts its dashboard with `ray start --head --include-dashboard=true`",
    ),
}


PLUGINS_VAR = "RAY_RUNTIME_ENV_PLUGINS"  # Ray's: a JSON list of {"class": "pkg.mod.Plugin", ...}


def runtime_env_fields() -> set[str] | None:
    """The runtime_env keys the installed Ray takes: RuntimeEnv's constructor arguments and its
    known_fields, plus the names of the plugins RAY_RUNTIME_ENV_PLUGINS lists. Any other key Ray drops
    without a word. None when a listed plugin cannot be read here (then any key may be its name)."""
    import inspect

    from ray.runtime_env import RuntimeEnv  # here: this module is imported before Ray is needed

    params = inspect.signature(RuntimeEnv.__init__).parameters.values()
    fields = {p.name for p in params if p.kind is p.KEYWORD_ONLY and not p.name.startswith("_")}
    fields |= set(RuntimeEnv.known_fields)
    plugins = os.environ.get(PLUGINS_VAR)
    if not plugins:
        return fields
    try:  # Ray's plugin manager imports each class and takes its `name`, as here
        classes = [entry["class"].rsplit(".", 1) for entry in json.loads(plugins)]
        return fields | {str(getattr(importlib.import_module(m), c).name) for m, c in classes}
    except (Exception, SystemExit):  # Ray's agent reports a bad plugin list; here any key may be one
        return None


REMOTE = ("s3://", "gs://", "https://", "http://", "gcs://", "file://", "azure://", "abfss://")


def runtime_env_problems(runtime_env: Mapping) -> list[str]:
    """Keys Ray knows (it drops others silently), local working_dir / py_modules / requirements files
    that exist (Ray fails in ray.init with a traceback), and env_vars."""
    fields = runtime_env_fields()
    problems = [
        _unknown_field(key, fields) for key in runtime_env if fields is not None and key not in fields
    ]
    problems += _local_paths(runtime_env)
    return problems + _env_vars_problems(runtime_env)


def _unknown_field(key: str, fields: set[str]) -> str:
    close = difflib.get_close_matches(str(key), sorted(fields), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    public = sorted(f for f in fields if not f.startswith("_"))
    return (
        f"{RUNTIME_ENV}.{key} is not a runtime_env field Ray knows, and Ray would drop it without a word; "
        f"{hint}Ray's fields are {public} (a plugin's name counts when {PLUGINS_VAR} lists it)"
    )


def _local_paths(runtime_env: Mapping) -> list[str]:
    """working_dir and py_modules entries that are local paths, and a pip/uv requirements file."""
    paths = [("working_dir", runtime_env.get("working_dir"))]
    modules = runtime_env.get("py_modules")
    paths += [(f"py_modules[{i}]", m) for i, m in enumerate(modules)] if isinstance(modules, list) else []
    for tool in ("pip", "uv"):
        spec = runtime_env.get(tool)
        if isinstance(spec, str) and not spec.startswith(REMOTE):  # a requirements file's path
            paths.append((tool, spec))
    problems = []
    for name, value in paths:
        if isinstance(value, str) and not value.startswith(REMOTE) and not os.path.exists(value):
            what = "a requirements file" if name in ("pip", "uv") else "a local folder (or a remote URI)"
            problems.append(f"{RUNTIME_ENV}.{name}={value!r} does not exist here; it must name {what}")
    return problems


def _env_vars_problems(runtime_env: Mapping) -> list[str]:
    """env_vars must map names to strings: Ray refuses any other value in ray.init, with a traceback.
    Hydra reads OMP_NUM_THREADS=4 as a number, so the fix names the quoted spelling."""
    env_vars = runtime_env.get("env_vars")
    if env_vars is None:
        return []
    if not isinstance(env_vars, Mapping):
        fix = f"set one variable per key ('+{RUNTIME_ENV}.env_vars.NAME=\"value\"')"
        return [f"{RUNTIME_ENV}.env_vars={env_vars!r} is not a mapping of variable names to values; {fix}"]
    return [_env_var_problem(name, value) for name, value in env_vars.items() if not isinstance(value, str)]


def _env_var_problem(name: str, value) -> str:
    key = f"{RUNTIME_ENV}.env_vars.{name}"
    if value is None:
        return f"{key} is null, and Ray takes only strings there: give it a quoted value ('+{key}=\"...\"') or remove it"
    return (
        f"{key}={value!r} is not a string, and Ray takes only strings there: quote it "
        f'(\'+{key}="{value}"\' on the command line, "{value}" in YAML)'
    )


def threads_problem(cfg: PPOTrainerConfig) -> str | None:
    """OMP_NUM_THREADS where the run starts (runtime_env's, else the environment's) is a thread count."""
    env_vars = cfg.ray_kwargs.ray_init.runtime_env.get("env_vars")
    if isinstance(env_vars, Mapping) and isinstance(env_vars.get(dev.THREADS_ENV), str):
        environ, name = env_vars, f"{RUNTIME_ENV}.env_vars.{dev.THREADS_ENV}"
    else:
        environ, name = os.environ, dev.THREADS_ENV
    try:
        dev.requested_threads(environ, name)
    except ValueError as e:
        return str(e)
    return None


def local_ray_problems(cfg: PPOTrainerConfig) -> list[str]:
    """ray_init's local-Ray keys, set by a run that joins a cluster (ray.init refuses num_cpus there;
    include_dashboard would do nothing)."""
    if not joins_cluster(cfg):
        return []
    key, address = cluster_address(cfg)
    r = cfg.ray_kwargs.ray_init
    return [
        f"ray_kwargs.ray_init.{name}={getattr(r, name)!r} is for a Ray the run starts, but it joins the "
        f"cluster at {key}={address!r}: unset it ({where})"
        for name, (default, where) in LOCAL_RAY_ONLY.items()
        if getattr(r, name) != default
    ]


def check_machine(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """ray_init's runtime_env and local-Ray keys, the workers' thread count
    (utils/device.worker_num_threads), and a local Ray's node: this machine's CPUs (or
    ray_init.num_cpus) and visible GPUs."""
    threads = threads_problem(cfg)
    problems = runtime_env_problems(cfg.ray_kwargs.ray_init.runtime_env) + ([threads] if threads else [])
    problems += local_ray_problems(cfg)
    if joins_cluster(cfg):
        unreachable = address_problem(cfg)
        return problems + ([unreachable] if unreachable else [])
    t = cfg.trainer
    node = local_node(cfg.ray_kwargs.ray_init.num_cpus, run.num_gpus)
    return problems + capacity_problems(t.nnodes, t.n_gpus_per_node, run.use_gpu, [node], local=True)


def check_cluster(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """The live nodes of the Ray cluster this process is connected to."""
    t = cfg.trainer
    return capacity_problems(t.nnodes, t.n_gpus_per_node, run.use_gpu, cluster_nodes(), local=False)

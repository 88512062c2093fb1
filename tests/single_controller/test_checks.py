"""single_controller/checks.py: the cluster address the run joins must answer before ray.init waits on it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import ray
from ray._private.runtime_env.plugin import RuntimeEnvPlugin

from verl_lite.single_controller.checks import address_problem, runtime_env_problems


def _cfg(address):
    return SimpleNamespace(ray_kwargs=SimpleNamespace(ray_init=SimpleNamespace(address=address)))


def test_an_unanswering_address_is_named_and_local_is_not_probed(monkeypatch):
    if ray.is_initialized():
        pytest.skip("a Ray connection in this process is used as is: nothing is probed")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert address_problem(_cfg(None)) is None
    assert address_problem(_cfg("local")) is None  # ray.init("local") starts a Ray of its own
    line = address_problem(_cfg("127.0.0.1:1"))
    assert line.startswith("ray_kwargs.ray_init.address='127.0.0.1:1': nothing answers at 127.0.0.1:1"), line
    assert "is not host:port" in address_problem(_cfg("no-port-here"))
    monkeypatch.setenv("RAY_ADDRESS", "local")
    assert address_problem(_cfg(None)) is None


def _problems(overrides: list[str]) -> list[str]:
    from verl_lite.config.compose import load_config
    from verl_lite.config.errors import ConfigError
    from verl_lite.preflight import prepare

    try:
        prepare(load_config(overrides, "demo"), num_gpus=0)
    except ConfigError as e:
        return e.problems
    return []


ENV_VARS = "ray_kwargs.ray_init.runtime_env.env_vars"


def test_runtime_env_vars_that_are_not_strings_stop_start_up_in_one_line_each(monkeypatch):
    """Ray's ray.init refuses them with a traceback; Hydra reads an unquoted 4 as a number."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert _problems([f"+{ENV_VARS}.OMP_NUM_THREADS=4", f"+{ENV_VARS}.A=null", f"+{ENV_VARS}.B=true"]) == [
        f"{ENV_VARS}.OMP_NUM_THREADS=4 is not a string, and Ray takes only strings there: quote it "
        f'(\'+{ENV_VARS}.OMP_NUM_THREADS="4"\' on the command line, "4" in YAML)',
        f"{ENV_VARS}.A is null, and Ray takes only strings there: give it a quoted value "
        f"('+{ENV_VARS}.A=\"...\"') or remove it",
        f"{ENV_VARS}.B=True is not a string, and Ray takes only strings there: quote it "
        f'(\'+{ENV_VARS}.B="True"\' on the command line, "True" in YAML)',
    ]
    (line,) = _problems([f"+{ENV_VARS}=FOO"])
    assert line.startswith(f"{ENV_VARS}='FOO' is not a mapping of variable names to values"), line
    assert _problems([f'+{ENV_VARS}.OMP_NUM_THREADS="2"', f'+{ENV_VARS}.NCCL_DEBUG="WARN"']) == []


RUNTIME_ENV = "ray_kwargs.ray_init.runtime_env"


def test_runtime_env_keys_ray_would_drop_and_local_paths_that_do_not_exist_are_named(monkeypatch, tmp_path):
    """Ray drops a runtime_env key it does not know without a word, and fails in ray.init with a
    traceback on a local working_dir, py_modules entry or requirements file that is not there."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    missing = tmp_path / "nope"
    problems = _problems(
        [
            f"+{RUNTIME_ENV}.workdir={tmp_path}",
            f"+{RUNTIME_ENV}.working_dir={missing}",
            f"+{RUNTIME_ENV}.py_modules=[{tmp_path},{missing}/mod,s3://bucket/mod.zip]",
            f"+{RUNTIME_ENV}.pip={missing}/requirements.txt",
        ]
    )
    assert problems[0].startswith(
        f"{RUNTIME_ENV}.workdir is not a runtime_env field Ray knows, and Ray would drop it without a word; "
        "did you mean 'working_dir'?"
    ), problems
    assert problems[1:] == [
        f"{RUNTIME_ENV}.working_dir='{missing}' does not exist here; it must name a local folder (or a remote URI)",
        f"{RUNTIME_ENV}.py_modules[1]='{missing}/mod' does not exist here; it must name a local folder (or a "
        "remote URI)",
        f"{RUNTIME_ENV}.pip='{missing}/requirements.txt' does not exist here; it must name a requirements file",
    ]
    good = [
        f"+{RUNTIME_ENV}.working_dir={tmp_path}",
        f"+{RUNTIME_ENV}.pip=[numpy]",
        f"+{RUNTIME_ENV}.excludes=[x]",
    ]
    assert _problems(good) == []


class CountingPlugin(RuntimeEnvPlugin):
    """A runtime_env plugin as a user registers one through RAY_RUNTIME_ENV_PLUGINS."""

    name = "counting_plugin"


def test_ray_s_own_newer_fields_and_a_registered_plugin_s_name_are_runtime_env_keys(monkeypatch):
    """The fields come from the installed Ray (nsight and rocprof_sys are RuntimeEnv arguments in Ray
    2.x that a hand-written list missed) and from the plugins RAY_RUNTIME_ENV_PLUGINS registers."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("RAY_RUNTIME_ENV_PLUGINS", raising=False)
    assert _problems([f"+{RUNTIME_ENV}.nsight=default", f"+{RUNTIME_ENV}.rocprof_sys={{}}"]) == []
    (unknown,) = _problems([f"+{RUNTIME_ENV}.counting_plugin=1"])
    assert unknown.startswith(f"{RUNTIME_ENV}.counting_plugin is not a runtime_env field Ray knows"), unknown
    monkeypatch.setenv("RAY_RUNTIME_ENV_PLUGINS", json.dumps([{"class": f"{__name__}.CountingPlugin"}]))
    assert _problems([f"+{RUNTIME_ENV}.counting_plugin=1"]) == []
    (misspelt,) = _problems([f"+{RUNTIME_ENV}.countng_plugin=1"])
    assert "did you mean 'counting_plugin'?" in misspelt, misspelt


def test_a_bad_omp_num_threads_in_the_runtime_env_is_named_there(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the runtime_env's value is the workers'
    assert _problems([f'+{ENV_VARS}.OMP_NUM_THREADS="0"']) == [
        f"{ENV_VARS}.OMP_NUM_THREADS='0' is not a positive whole number: set it to the threads each worker "
        "should use (e.g. OMP_NUM_THREADS=4) or unset it"
    ]


def test_keys_for_a_local_ray_are_refused_when_the_run_joins_a_cluster(monkeypatch):
    """ray.init refuses num_cpus when joining; include_dashboard would do nothing there."""
    if ray.is_initialized():
        pytest.skip("a Ray connection in this process is used as is: the address is not probed")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    joined = ["ray_kwargs.ray_init.address=127.0.0.1:1"]
    problems = _problems(
        [*joined, "ray_kwargs.ray_init.num_cpus=4", "ray_kwargs.ray_init.include_dashboard=true"]
    )
    where = "but it joins the cluster at ray_kwargs.ray_init.address='127.0.0.1:1': unset it"
    assert problems[0] == (
        f"ray_kwargs.ray_init.num_cpus=4 is for a Ray the run starts, {where} (a cluster's nodes offer the "
        "CPUs `ray start --num-cpus` gave them)"
    )
    assert problems[1].startswith(
        f"ray_kwargs.ray_init.include_dashboard=True is for a Ray the run starts, {where}"
    )
    assert problems[2].startswith("ray_kwargs.ray_init.address='127.0.0.1:1': nothing answers"), problems
    assert len(problems) == 3
    # address=local starts a Ray of the run's own: num_cpus is for it, and sizes the node it checks
    (line,) = _problems(["ray_kwargs.ray_init.address=local", "ray_kwargs.ray_init.num_cpus=1"])
    assert line.startswith("trainer.nnodes=1 x trainer.n_gpus_per_node=2 needs 2 CPUs"), line
    assert line.endswith("this machine has [1] CPUs; set trainer.n_gpus_per_node <= 1"), line


def test_ray_init_gets_the_runtime_env_whether_the_run_starts_ray_or_joins_a_cluster(monkeypatch):
    from verl_lite.config.compose import load_config
    from verl_lite.trainer.ray_start import ray_init_kwargs

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    user = [f'+{ENV_VARS}.NCCL_DEBUG="WARN"', "+ray_kwargs.ray_init.runtime_env.working_dir=/srv/job"]
    local = ray_init_kwargs(load_config([*user, "ray_kwargs.ray_init.num_cpus=2"], "demo"))
    assert local["address"] == "local" and local["num_cpus"] == 2
    assert local["runtime_env"] == {
        "working_dir": "/srv/job",
        "env_vars": {"TOKENIZERS_PARALLELISM": "false", "NCCL_DEBUG": "WARN"},
    }
    assert ray_init_kwargs(load_config([*user, "ray_kwargs.ray_init.address=local"], "demo")) == local | {
        "num_cpus": None
    }
    # a cluster's job: the user's runtime_env as written (Ray refuses a key the submitted job's env sets too)
    joined = ray_init_kwargs(load_config([*user, "ray_kwargs.ray_init.address=head:6379"], "demo"))
    assert joined == {
        "address": "head:6379",
        "runtime_env": {"env_vars": {"NCCL_DEBUG": "WARN"}, "working_dir": "/srv/job"},
    }
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    assert ray_init_kwargs(load_config([], "demo")) == {"address": "head:6379"}


def test_verl_0_9_s_py_executable_is_a_runtime_env_key_null_being_ray_s_default(monkeypatch, tmp_path):
    """Every verl 0.9 launch script passes ray_kwargs.ray_init.runtime_env.py_executable (its uv
    launcher's interpreter, null without uv), without a `+`: the key is in the config, a null reaches
    Ray as no value (Ray's default), a path reaches it as written, joined cluster or local Ray."""
    from verl_lite.config.compose import load_config
    from verl_lite.trainer.ray_start import ray_init_kwargs

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    key = "ray_kwargs.ray_init.runtime_env.py_executable"
    plain = ray_init_kwargs(load_config([f"{key}=null"], "demo"))
    assert plain["runtime_env"] == {"env_vars": {"TOKENIZERS_PARALLELISM": "false"}}
    assert ray_init_kwargs(load_config([f"{key}=null", "ray_kwargs.ray_init.address=head:6379"], "demo")) == {
        "address": "head:6379"
    }
    python = str(tmp_path / "bin" / "python")
    given = load_config([f"{key}={python}"], "demo")
    assert ray_init_kwargs(given)["runtime_env"]["py_executable"] == python
    assert runtime_env_problems(given.ray_kwargs.ray_init.runtime_env) == []

"""A runtime_env Ray cannot set up (pip packages that cannot install) fails the worker group's first
call with one line naming the key and Ray's reason, not Ray's traceback (the session's test Ray)."""

import ray

from verl_lite.single_controller import RayWorkerGroup, WorkerError


@ray.remote(num_cpus=0)
class Probe:
    def ping(self):
        return "pong"


def test_a_runtime_env_that_cannot_be_set_up_is_one_line_naming_the_key(ray_local):
    # a package no index has, and no index to ask: pip (or Ray's check for virtualenv) fails at once
    env = {"pip": ["no-such-package-verl-lite-38"], "env_vars": {"PIP_NO_INDEX": "1"}}
    actor = Probe.options(runtime_env=env).remote()
    group = RayWorkerGroup.__new__(RayWorkerGroup)  # the result collection of a group, on that actor
    group.name, group.failed, group.log_files = "actor_rollout_ref", False, [None]
    try:
        group._get_all("ping", [actor.ping.remote()])
        raise AssertionError("the runtime_env was set up")
    except WorkerError as e:
        message = str(e)
    finally:
        ray.kill(actor)
    assert "\n" not in message and group.failed, message
    assert message.startswith(
        "ray_kwargs.ray_init.runtime_env: Ray could not set up the environment of actor_rollout_ref rank 0: "
    ), message
    assert message.endswith("; fix the runtime_env (its pip packages, working_dir, ...) or remove it"), (
        message
    )
    assert "Traceback" not in message and "File " not in message, message
    assert ray.get(Probe.remote().ping.remote()) == "pong"  # the Ray is fine for everything else

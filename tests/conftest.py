"""Shared fixtures: one local Ray for the tests that need it, torch on one thread."""

import os
import signal
import subprocess
import sys

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# the tests' local servers (SandboxFusion's API, MCP, Ray's GCS) are never reached through a proxy
# that a machine's http_proxy names
for _name in ("NO_PROXY", "no_proxy"):
    os.environ[_name] = ",".join(filter(None, [os.environ.get(_name, ""), "127.0.0.1,localhost"]))
torch.set_num_threads(1)


def pytest_addoption(parser):
    parser.addoption(
        "--prebuild",
        action="store_true",
        help="build the end-to-end tests' models and data in a background process while the tests run "
        "(tests/helpers/prebuild.py; `make test` passes it)",
    )


def pytest_sessionstart(session):
    """With --prebuild, the controller (xdist's, or the only process) starts the background build."""
    config = session.config
    if not config.getoption("--prebuild") or hasattr(config, "workerinput"):
        return
    from verl_lite.data import assets

    log = assets.cache_root().parent / "prebuild.log"  # beside what it builds
    log.parent.mkdir(parents=True, exist_ok=True)
    config._prebuild_log = log
    with open(log, "w") as out:
        config._prebuild = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.prebuild"],
            cwd=config.rootpath,
            stdout=out,
            stderr=out,
            # its own process group (a pinned build's child is ended with it), not its own session: this
            # kernel shares the CPU between sessions first (autogroup), so a session of its own took
            # half the machine from the tests' session, and Ray's start-ups timed out under them
            process_group=0,
        )


def pytest_terminal_summary(terminalreporter, config):
    proc = getattr(config, "_prebuild", None)
    if proc is None:
        return
    if proc.poll() is None:  # the run ended first (a selection of tests); build_once's next use of
        os.killpg(proc.pid, signal.SIGTERM)  # the cache removes the unfinished build's folder
        proc.wait()
    failed = [line for line in config._prebuild_log.read_text().splitlines() if " failed: " in line]
    if failed:
        terminalreporter.write_line(f"{failed[0]} (all: {config._prebuild_log})")


def pytest_collection_modifyitems(config, items):
    """The end-to-end files (marked slow) first: `make test` gives whole files to two workers in this
    order, so the long files start early and the short ones fill in at the end, instead of one
    worker running a long file alone while the other idles. The sort is stable: files and tests keep
    their order within each group."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def ray_local():
    import ray

    from verl_lite.trainer.ray_start import LOCAL_SYSTEM_CONFIG

    # address="local": never join a cluster another test left running on this machine (ray.init's default);
    # the system config a run's own local Ray gets (workers at the driver's priority)
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}},
        _system_config=dict(LOCAL_SYSTEM_CONFIG),
    )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A random tiny Qwen2 folder (fast to build) for engine and rollout tests."""
    from tests.helpers.models import make_tiny_model_dir

    return make_tiny_model_dir(str(tmp_path_factory.mktemp("tiny_model")))


@pytest.fixture(scope="session")
def tool_demo_assets():
    """The tool demo's embedded assets (conf/tool_demo.yaml), built once into the asset cache:
    (model folder, data folder with train/test parquet and tool_config.yaml)."""
    from verl_lite.data import assets

    return assets.resolve("verl_lite://tiny-qwen2-tool"), assets.resolve("verl_lite://arith-tool")

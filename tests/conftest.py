"""Shared fixtures: one local Ray for the tests that need it, torch on one thread."""

import os

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# the tests' local servers (SandboxFusion's API, MCP, Ray's GCS) are never reached through a proxy
# that a machine's http_proxy names
for _name in ("NO_PROXY", "no_proxy"):
    os.environ[_name] = ",".join(filter(None, [os.environ.get(_name, ""), "127.0.0.1,localhost"]))
torch.set_num_threads(1)


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

"""single_controller/checks.py: the cluster address the run joins must answer before ray.init waits on it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import ray

from verl_lite.single_controller.checks import address_problem


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

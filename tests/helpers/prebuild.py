"""The models and data the suite's end-to-end tests need, built in one background process while the
tests run (`make test` passes --prebuild; tests/conftest.py starts `python -m tests.helpers.prebuild`).

A machine without the cache folder (VERL_LITE_CACHE, data/assets.py), as a fresh CI machine is,
builds about five minutes of one core's warm starts: the tool demo's model alone ~200 s. Built inside
the first test that needs each, they held that pytest worker while the tests that need nothing of
them waited behind it; here they run beside the tests, at a lower priority (nice 10), on the CPU the
tests leave idle (Ray's and vLLM's start-ups, sleeps, locks). Each build goes through
data/assets.build_once, under the same lock a test takes: a test that needs a model being built
waits for it, a test that got there first builds it and this process then finds it done, so nothing
is built twice. With the cache filled this process only checks it. A failed build is logged and
skipped: the test that needs the model builds it and says why.

Ordered by when the suite first needs each (tests/conftest.py runs the end-to-end files first):
the single-turn demo's model and data (nearly every CLI run, from the first minute), the tool
demo's (the MCP, tool demo and gpt-oss runs, minutes later), then the test models of the verl
multi-turn scripts and the gpt-oss run.
"""

from __future__ import annotations

import sys
import time


def _asset(name: str):
    def build():
        from verl_lite.data import assets

        assets.resolve(f"verl_lite://{name}")

    return build


def _verl_multi_turn_model():
    from tests.helpers.verl_multi_turn import tiny_model_dir

    tiny_model_dir(None)


def _gpt_oss_model():
    from tests.helpers.gpt_oss_model import calculator_model_dir

    calculator_model_dir(None)


BUILDS = [
    ("embedded model tiny-qwen2-arith", _asset("tiny-qwen2-arith")),
    ("embedded data arith", _asset("arith")),
    ("embedded data arith-tool", _asset("arith-tool")),
    ("embedded model tiny-qwen2-tool", _asset("tiny-qwen2-tool")),
    ("verl multi-turn scripts' model", _verl_multi_turn_model),
    ("gpt-oss run's model", _gpt_oss_model),
]


def main() -> int:
    import os

    import torch

    # below the tests: the builds take the CPU the tests leave idle, and a test that waits on a model
    # being built leaves its share to the build (Ray's start-ups timed out beside a build at equal priority)
    os.nice(10)

    # one thread, as tests/conftest.py sets it: the test models' cache keys include the thread count
    torch.set_num_threads(1)
    failed = 0
    for name, build in BUILDS:
        start = time.time()
        try:
            build()
        except Exception as e:  # the test that needs it builds it again and fails with the cause
            failed += 1
            print(f"prebuild: {name} failed: {type(e).__name__}: {e}", flush=True)
            continue
        print(f"prebuild: {name} ready after {time.time() - start:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

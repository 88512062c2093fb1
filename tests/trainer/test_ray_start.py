"""A local Ray's runtime env (trainer/ray_start.runtime_env): verl_lite's worker variables, glibc's
malloc tuning among them, are defaults that the user's own values replace, never the other way
round. A real worker seeing them: tests/single_controller/test_worker_threads.py."""

from verl_lite.trainer.ray_start import MALLOC_ENV, runtime_env

TUNED = {name: value for name, (_, value) in MALLOC_ENV.items()}


def test_a_plain_start_gives_the_workers_the_malloc_tuning():
    env = runtime_env({}, environ={"PATH": "/bin"})
    assert env == {"env_vars": {"TOKENIZERS_PARALLELISM": "false", **TUNED}}
    assert TUNED == {
        "MALLOC_MMAP_THRESHOLD_": "33554432",
        "MALLOC_TRIM_THRESHOLD_": "1073741824",
        "MALLOC_TOP_PAD_": "67108864",
    }


def test_a_value_set_where_the_run_starts_is_left_to_the_workers_to_inherit():
    env = runtime_env({}, environ={"MALLOC_TRIM_THRESHOLD_": "131072", "MALLOC_TOP_PAD_": ""})
    assert env["env_vars"] == {"TOKENIZERS_PARALLELISM": "false", "MALLOC_MMAP_THRESHOLD_": "33554432"}


def test_a_glibc_tunable_of_the_same_knob_counts_as_set():
    tunables = "glibc.malloc.check=3: glibc.malloc.mmap_threshold=65536:glibc.malloc.top_pad=0"
    env = runtime_env({}, environ={"GLIBC_TUNABLES": tunables})
    assert env["env_vars"] == {"TOKENIZERS_PARALLELISM": "false", "MALLOC_TRIM_THRESHOLD_": "1073741824"}
    env = runtime_env({"env_vars": {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"}}, environ={})
    assert env["env_vars"] == {
        "TOKENIZERS_PARALLELISM": "false",
        "MALLOC_MMAP_THRESHOLD_": "33554432",
        "MALLOC_TOP_PAD_": "67108864",
        "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1",
    }


def test_the_users_runtime_env_wins_and_keeps_its_other_fields():
    user = {
        "env_vars": {"MALLOC_MMAP_THRESHOLD_": "1048576", "TOKENIZERS_PARALLELISM": "true"},
        "working_dir": "/x",
    }
    env = runtime_env(user, environ={})
    assert env == {
        "working_dir": "/x",
        "env_vars": {
            "TOKENIZERS_PARALLELISM": "true",
            "MALLOC_MMAP_THRESHOLD_": "1048576",
            "MALLOC_TRIM_THRESHOLD_": "1073741824",
            "MALLOC_TOP_PAD_": "67108864",
        },
    }
    assert user["env_vars"] == {"MALLOC_MMAP_THRESHOLD_": "1048576", "TOKENIZERS_PARALLELISM": "true"}

"""utils/user_code.exits_as_errors, the one way a site that runs a user's code turns sys.exit() into
a line naming the code, and lets KeyboardInterrupt (a real Ctrl-C, far more often) stop the run."""

import pytest

from verl_lite.reward.scorers import load_custom_scorer
from verl_lite.utils.class_path import import_class
from verl_lite.utils.user_code import UserCodeExit, exits_as_errors


def test_sys_exit_becomes_the_callers_error_naming_the_code_and_its_file():
    with pytest.raises(UserCodeExit) as info:
        with exits_as_errors("my code", UserCodeExit):
            raise SystemExit(3)
    assert str(info.value).startswith("my code (")
    assert str(info.value).endswith(
        "user_code.py) called sys.exit(3), which would end the run; raise an exception instead to report a problem"
    )
    with pytest.raises(
        RuntimeError, match=r"^loop called sys.exit\(None\) on row 2, which would end the worker; x$"
    ):
        with exits_as_errors("loop", after=" on row 2", ends="the worker", fix="x", error=RuntimeError):
            raise SystemExit


def test_keyboard_interrupt_is_not_blamed_on_the_users_code():
    with pytest.raises(KeyboardInterrupt):
        with exits_as_errors("my code"):
            raise KeyboardInterrupt


def test_a_reward_file_or_a_module_interrupted_at_import_stops_as_ctrl_c(tmp_path, monkeypatch):
    reward = tmp_path / "interrupts.py"
    reward.write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        load_custom_scorer(str(reward), "compute_score")
    (tmp_path / "interrupts_mt38.py").write_text("raise KeyboardInterrupt\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        import_class("interrupts_mt38.Anything")


def test_a_reward_file_that_exits_at_import_is_still_one_line(tmp_path):
    reward = tmp_path / "exits.py"
    reward.write_text("import sys\nsys.exit(0)\n")
    with pytest.raises(ValueError) as info:
        load_custom_scorer(str(reward), "compute_score")
    assert str(info.value) == (
        f"custom_reward_function.path='{reward}' called sys.exit(0) when imported, which would end the run; "
        "a reward file must define its function without exiting"
    )

"""Experiment tracking: `trainer.logger` is a list of backends, each getting every step's metrics.

console      every metric of the step under verl's name, grouped (console_format.py), under a
             progress bar over the training steps
file         one JSON object per step appended to <trainer.default_local_dir>/metrics.jsonl
wandb        a Weights & Biases run (trainer/trackers.py)
tensorboard  TensorBoard event files (trainer/trackers.py)

Every backend also takes the validation samples of `trainer.log_val_generations`
(`log_generations`): console prints them, file appends them to val_generations.jsonl.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager

from tqdm import tqdm

from verl_lite.errors import RunError
from verl_lite.trainer.console_format import console_width, fmt_value, format_step
from verl_lite.trainer.trackers import Sample, TensorboardLogger, WandbLogger
from verl_lite.utils.logs import console_write


class ConsoleLogger:
    def __init__(self, total_steps: int):
        self.total_steps = total_steps
        # disable=None: a live bar on a terminal, none in a log file (where it would print every redraw)
        self.bar = tqdm(total=total_steps, desc="training", unit="step", dynamic_ncols=True, disable=None)

    def log(self, metrics: dict, step: int) -> None:
        console_write(format_step(metrics, step, self.total_steps, console_width()))
        if step > self.bar.n:
            self.bar.update(step - self.bar.n)

    def log_generations(self, samples: list[Sample], step: int) -> None:
        for text_in, text_out, score in samples:
            console_write(
                f"val step {step} | input {text_in!r} | output {text_out!r} | score {fmt_value(score)}"
            )

    def finish(self) -> None:
        self.bar.close()


class FileLogger:
    def __init__(self, local_dir: str):
        os.makedirs(local_dir, exist_ok=True)
        self.path = os.path.join(local_dir, "metrics.jsonl")
        self.generations_path = os.path.join(local_dir, "val_generations.jsonl")

    def log(self, metrics: dict, step: int) -> None:
        with written(self.path, step):
            with open(self.path, "a") as f:
                f.write(json.dumps({"step": step, **metrics}, allow_nan=True) + "\n")

    def log_generations(self, samples: list[Sample], step: int) -> None:
        with written(self.generations_path, step):
            with open(self.generations_path, "a") as f:
                for text_in, text_out, score in samples:
                    row = {"step": step, "input": text_in, "output": text_out, "score": score}
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")

    def finish(self) -> None:
        pass


@contextmanager
def written(path: str, step: int):
    """A failed write (a full disk) as one line naming the file, not a traceback."""
    try:
        yield
    except OSError as e:
        raise RunError(f"cannot write {path} at step {step}: {e.strerror or e}") from e


BACKENDS = ("console", "file", "wandb", "tensorboard")


def logger_problems(backends: list[str]) -> list[str]:
    """trainer.logger names only known backends (checked at start-up and by Tracking)."""
    unknown = [b for b in backends if b not in BACKENDS]
    if not unknown:
        return []
    use = ", ".join(BACKENDS)
    return [f"trainer.logger={unknown} is not supported by verl_lite: use any of {use}"]


class Tracking:
    def __init__(
        self,
        backends: list[str],
        local_dir: str,
        total_steps: int,
        project_name: str = "verl_lite",
        experiment_name: str = "run",
        config=None,
    ):
        problems = logger_problems(backends)
        if problems:
            raise ValueError(problems[0])
        self.loggers = []
        if "console" in backends:
            self.loggers.append(ConsoleLogger(total_steps))
        if "file" in backends:
            self.loggers.append(FileLogger(local_dir))
        if "wandb" in backends:
            self.loggers.append(WandbLogger(project_name, experiment_name, local_dir, config))
        if "tensorboard" in backends:
            self.loggers.append(TensorboardLogger(local_dir))

    @classmethod
    def from_config(cls, config, total_steps: int) -> Tracking:
        t = config.trainer
        return cls(t.logger, t.default_local_dir, total_steps, t.project_name, t.experiment_name, config)

    def log(self, metrics: dict, step: int) -> None:
        for logger in self.loggers:
            logger.log(metrics, step)

    def log_generations(self, samples: list[Sample], step: int) -> None:
        for logger in self.loggers:
            logger.log_generations(samples, step)

    def finish(self) -> None:
        for logger in self.loggers:
            logger.finish()

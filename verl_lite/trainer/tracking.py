"""Experiment tracking: `trainer.logger` is a list of backends, each getting every step's metrics.

console      one line of headline metrics per step; the full grouped block (every metric under
             verl's name) at validation steps, the last step and every `trainer.console_full_freq`
             steps (console_format.py); on a terminal, under a progress bar showing the headline
file         one JSON object per step appended to <trainer.default_local_dir>/metrics.jsonl
wandb        a Weights & Biases run (trainer/trackers.py)
tensorboard  TensorBoard event files (trainer/trackers.py)

Every backend also takes the validation samples of `trainer.log_val_generations`
(`log_generations`): console prints them, file appends them to val_generations.jsonl.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager

from tqdm import tqdm

from verl_lite.errors import RunError
from verl_lite.trainer import console_format as cf
from verl_lite.trainer.trackers import Sample, TensorboardLogger, WandbLogger
from verl_lite.utils.logs import console_write


class ConsoleLogger:
    def __init__(self, total_steps: int, full_freq: int = -1, stream=None):
        self.total_steps, self.full_freq = total_steps, full_freq
        self.stream = stream or sys.stdout
        # a live bar on a terminal only: in a log file (CI, Slurm) every redraw would be a line
        live = self.stream.isatty()
        self.bar = tqdm(total=total_steps, desc="training", unit="step", file=self.stream, disable=not live)

    def log(self, metrics: dict, step: int) -> None:
        """Validation steps (val-* metrics), the last step and every full_freq-th show every metric."""
        every = self.full_freq > 0 and step % self.full_freq == 0
        if step >= self.total_steps or every or any(cf.group_of(k) == "val" for k in metrics):
            console_write(cf.format_step(metrics, step, self.total_steps, cf.console_width()), self.stream)
        else:
            console_write(cf.format_line(metrics, step, self.total_steps), self.stream)
        if step > self.bar.n:
            self.bar.set_postfix_str(" | ".join(f"{k} {v}" for k, v in cf.headline(metrics)), refresh=False)
            self.bar.update(step - self.bar.n)

    def log_generations(self, samples: list[Sample], step: int) -> None:
        for text_in, text_out, score in samples:
            line = f"val step {step} | input {text_in!r} | output {text_out!r} | score {cf.fmt_value(score)}"
            console_write(line, self.stream)

    def finish(self) -> None:
        self.bar.close()


class FileLogger:
    def __init__(self, local_dir: str):
        os.makedirs(local_dir, exist_ok=True)
        self.path = os.path.join(local_dir, "metrics.jsonl")
        self.generations_path = os.path.join(local_dir, "val_generations.jsonl")

    def log(self, metrics: dict, step: int) -> None:
        with written(self.path, step), open(self.path, "a") as f:
            f.write(json.dumps({"step": step, **metrics}, allow_nan=True) + "\n")

    def log_generations(self, samples: list[Sample], step: int) -> None:
        with written(self.generations_path, step), open(self.generations_path, "a") as f:
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
        console_full_freq: int = -1,
    ):
        problems = logger_problems(backends)
        if problems:
            raise ValueError(problems[0])
        self.loggers = []
        if "console" in backends:
            self.loggers.append(ConsoleLogger(total_steps, console_full_freq))
        if "file" in backends:
            self.loggers.append(FileLogger(local_dir))
        if "wandb" in backends:
            self.loggers.append(WandbLogger(project_name, experiment_name, local_dir, config))
        if "tensorboard" in backends:
            self.loggers.append(TensorboardLogger(local_dir))

    @classmethod
    def from_config(cls, config, total_steps: int) -> Tracking:
        t = config.trainer
        names = (t.project_name, t.experiment_name, config, t.console_full_freq)
        return cls(t.logger, t.default_local_dir, total_steps, *names)

    def log(self, metrics: dict, step: int) -> None:
        for logger in self.loggers:
            logger.log(metrics, step)

    def log_generations(self, samples: list[Sample], step: int) -> None:
        for logger in self.loggers:
            logger.log_generations(samples, step)

    def finish(self) -> None:
        for logger in self.loggers:
            logger.finish()

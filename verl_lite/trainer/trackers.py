"""Experiment trackers beyond the local ones: Weights & Biases and TensorBoard.

Both follow verl's conventions so dashboards line up: the run is named
`trainer.project_name` / `trainer.experiment_name`, every step's metrics go out under verl's
names with the training step as the x-axis, and validation samples are logged as
`val/generations` (a W&B table with one row per validation, a TensorBoard text entry).

Where files go (both importable and offline-capable, so nothing here needs a network):
  wandb        `$WANDB_DIR` if set, else `<trainer.default_local_dir>`; the run lands in its
               `wandb/` folder. `WANDB_MODE=offline` keeps it local (`wandb sync` uploads later).
  tensorboard  `$TENSORBOARD_DIR` if set (verl's variable), else `<trainer.default_local_dir>/tensorboard`
               (verl's own default is `tensorboard_log/<project>/<experiment>` under the working dir;
               keeping it beside metrics.jsonl gives each Hydra multirun job its own).
"""

from __future__ import annotations

import configparser
import dataclasses
import netrc
import numbers
import os
from urllib.parse import urlparse

Sample = tuple[str, str, float]  # (input, output, score) of one validation generation
OFFLINE_MODES = ("offline", "disabled", "dryrun")


def _wandb_settings() -> dict[str, str]:
    """wandb's settings files (the user's, then the working directory's): their [default] entries."""
    config_dir = os.environ.get("WANDB_CONFIG_DIR") or os.path.expanduser("~/.config/wandb")
    found: dict[str, str] = {}
    for file in (os.path.join(config_dir, "settings"), os.path.join("wandb", "settings")):
        parser = configparser.ConfigParser()
        try:
            parser.read(file)
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue
        found |= dict(parser["default"]) if parser.has_section("default") else {}
    return found


def _netrc_has(host: str | None) -> bool:
    path = os.path.expanduser(os.environ.get("NETRC") or "~/.netrc")
    try:
        return bool(host) and netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_problem() -> str | None:
    """wandb online without an API key asks for one on the terminal at wandb.init (after the workers
    have started), or fails in a job without one: found at start-up instead. The key is looked for
    where wandb looks (WANDB_API_KEY, an identity token file, its settings, ~/.netrc for the host)."""
    settings = _wandb_settings()
    mode = os.environ.get("WANDB_MODE") or settings.get("mode")
    if mode in OFFLINE_MODES or os.environ.get("WANDB_DISABLED", "").lower() in ("1", "true", "yes"):
        return None
    if (
        os.environ.get("WANDB_API_KEY")
        or os.environ.get("WANDB_IDENTITY_TOKEN_FILE")
        or settings.get("api_key")
    ):
        return None
    base = os.environ.get("WANDB_BASE_URL") or settings.get("base_url") or "https://api.wandb.ai"
    host = urlparse(base).hostname
    if _netrc_has(host):
        return None
    return (
        f"trainer.logger includes wandb, but no W&B API key for {host} was found (WANDB_API_KEY, or ~/.netrc "
        "from `wandb login`) and WANDB_MODE is not offline: wandb would stop the run at its start to ask for "
        "one; run `wandb login`, set WANDB_API_KEY, or set WANDB_MODE=offline (the run stays local, "
        "`wandb sync` uploads it later)"
    )


def _as_dict(config) -> dict | None:
    return dataclasses.asdict(config) if dataclasses.is_dataclass(config) else config


def _numeric(metrics: dict) -> dict:
    bad = {k: type(v).__name__ for k, v in metrics.items() if not isinstance(v, numbers.Number)}
    if bad:
        raise TypeError(f"metrics must be numbers to be tracked; got {bad}")
    return metrics


class WandbLogger:
    def __init__(self, project_name: str, experiment_name: str, local_dir: str, config=None):
        import wandb

        self.wandb = wandb
        directory = os.environ.get("WANDB_DIR") or local_dir
        os.makedirs(directory, exist_ok=True)
        # the run id is left to wandb: Hydra multirun jobs share project and experiment names
        self.run = wandb.init(
            project=project_name, name=experiment_name, dir=directory, config=_as_dict(config)
        )
        self.rows: list[list] = []

    def log(self, metrics: dict, step: int) -> None:
        self.run.log(_numeric(metrics), step=step)

    def log_generations(self, samples: list[Sample], step: int) -> None:
        """One table row per validation: step, then input/output/score of each sample (verl's layout).
        A new table object each time, holding all rows so far: wandb tables are immutable once logged."""
        columns = ["step"] + [
            f"{f}_{i + 1}" for i in range(len(samples)) for f in ("input", "output", "score")
        ]
        self.rows.append([step] + [v for sample in samples for v in sample])
        self.run.log({"val/generations": self.wandb.Table(columns=columns, data=self.rows)}, step=step)

    def finish(self) -> None:
        """The run finished, and wandb-core's writing done: `run.finish()` can return before wandb-core
        has written the run's records to its run-<id>.wandb file (under load it held 7 bytes, its
        header, 1 time in 6), and the run's process guard ends every process the run started once the
        driver exits, wandb-core included. `wandb.teardown()` waits for wandb-core to finish; a later
        wandb.init (the next job of a Hydra multirun) starts a new one."""
        self.run.finish()
        self.wandb.teardown()


class TensorboardLogger:
    def __init__(self, local_dir: str):
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = os.environ.get("TENSORBOARD_DIR") or os.path.join(local_dir, "tensorboard")
        os.makedirs(self.log_dir, exist_ok=True)
        self.writer = SummaryWriter(log_dir=self.log_dir)

    def log(self, metrics: dict, step: int) -> None:
        for key, value in _numeric(metrics).items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_generations(self, samples: list[Sample], step: int) -> None:
        parts = [f"**validation step {step}**"]
        for i, (text_in, text_out, score) in enumerate(samples):
            parts.append(
                f"### sample {i + 1}\n\n**input:** {text_in}\n\n**output:** {text_out}\n\n**score:** {score}"
            )
        self.writer.add_text("val/generations", "\n\n".join(parts), step)
        self.writer.flush()

    def finish(self) -> None:
        self.writer.close()

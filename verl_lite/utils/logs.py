"""Where every process's output goes: the console a person reads, or the run folder's log files.

The console shows the run: verl_lite's own messages, each step's metrics under a progress bar, and
errors. What the process and its libraries print besides (vLLM, Ray and transformers start-up
notices, deprecation warnings, messages from C++, the reward manager's examples) goes to log files
in the run folder, where it can still be read, and never to the terminal.

Driver (`setup_driver_logging`, called by main_ppo once the run folder is known):
  console (stdout)     verl_lite records at INFO and above, any record at ERROR and above, and the
                       tracker's step lines (`console_write`, above the tqdm bar)
  <run>/main_ppo.log   every record: verl_lite's from DEBUG (the reward examples), the rest from
                       INFO, Python warnings included; libraries that print through handlers of
                       their own (Ray's, transformers') are routed through this too
  An uncaught error still prints on stderr (Hydra reports it), so a failing run shows its error.

Workers (`route_worker_output`, first thing in every Ray worker's __init__):
  <run>/logs/<group>_rank<r>.log   the process's stdout and stderr file descriptors: everything the
                       worker or a library in it prints, from Python or from C++, lands here
  console              the worker's original stderr, which Ray forwards to the driver's console
                       with the worker's name and pid: verl_lite records at WARNING and above, any
                       record at ERROR and above
  An exception in a worker method reaches the driver as a WorkerError carrying the traceback and
  prints there; for a worker that dies, the error names its log file and quotes the file's end.

The driver tells the worker groups where the logs go through VERL_LITE_LOG_DIR (set here); each
group gives every rank its file in VERL_LITE_WORKER_LOG. Without them (tests that build groups
directly) workers print as before.
"""

from __future__ import annotations

import logging
import os
import sys

from tqdm import tqdm

LOG_DIR_ENV = "VERL_LITE_LOG_DIR"
WORKER_LOG_ENV = "VERL_LITE_WORKER_LOG"
DRIVER_LOG = "main_ppo.log"
FILE_FORMAT = "[%(asctime)s][%(process)d][%(name)s][%(levelname)s] - %(message)s"
OWN = "verl_lite"
FILE_ONLY = "file_only"  # a record with extra={FILE_ONLY: True} goes to the log file, never the console


def console_write(text: str, stream=None) -> None:
    """Print on the console above the progress bar (tqdm clears and redraws it), flushed at once so
    the order of lines survives a pipe."""
    stream = stream or sys.stdout
    tqdm.write(text, file=stream)
    stream.flush()


class ConsoleFilter(logging.Filter):
    """verl_lite's records from `own_level`, everybody's errors."""

    def __init__(self, own_level: int):
        super().__init__()
        self.own_level = own_level

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, FILE_ONLY, False):  # the long form of an error the console shows in one line
            return False
        if record.levelno >= logging.ERROR:
            return True
        return record.name.split(".")[0] == OWN and record.levelno >= self.own_level


class ConsoleFormatter(logging.Formatter):
    """`HH:MM:SS message`, with the level named from WARNING up."""

    def __init__(self):
        super().__init__("%(asctime)s %(message)s", datefmt="%H:%M:%S")

    def formatMessage(self, record: logging.LogRecord) -> str:
        if record.levelno >= logging.WARNING:
            record.message = f"{record.levelname}: {record.message}"
        return super().formatMessage(record)


class ConsoleHandler(logging.Handler):
    def __init__(self, stream, own_level: int):
        super().__init__()
        self.stream = stream
        self.addFilter(ConsoleFilter(own_level))
        self.setFormatter(ConsoleFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        try:
            console_write(self.format(record), self.stream)
        except Exception:
            self.handleError(record)


def _is_console_handler(handler: logging.Handler) -> bool:
    return isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)


def route_library_loggers() -> None:
    """Libraries that print through console handlers of their own (Ray's `ray` logger, transformers')
    hand their records to the root logger instead, whose handlers decide where they go."""
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger) or name.split(".")[0] == OWN:
            continue
        own_console = [h for h in logger.handlers if _is_console_handler(h)]
        for handler in own_console:
            logger.removeHandler(handler)
        if own_console:
            logger.propagate = True


def _reset_root(level: int) -> logging.Logger:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)
    logging.getLogger(OWN).setLevel(logging.DEBUG)
    logging.captureWarnings(True)  # warnings.warn -> the py.warnings logger -> the log file
    return root


def setup_driver_logging(run_dir: str) -> str:
    """Route the driver's output (see the module docstring); returns the driver's log file."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, DRIVER_LOG)
    root = _reset_root(logging.INFO)
    to_file = logging.FileHandler(path, mode="a", encoding="utf-8")
    to_file.setFormatter(logging.Formatter(FILE_FORMAT))
    root.addHandler(to_file)
    root.addHandler(ConsoleHandler(sys.stdout, own_level=logging.INFO))
    route_library_loggers()
    os.environ[LOG_DIR_ENV] = os.path.abspath(os.path.join(run_dir, "logs"))
    return path


def worker_log_path(group: str, rank: int) -> str | None:
    """The log file of rank `rank` of worker group `group`, when the driver routes output."""
    log_dir = os.environ.get(LOG_DIR_ENV)
    return os.path.join(log_dir, f"{group}_rank{rank}.log") if log_dir else None


def route_worker_output() -> str | None:
    """In a worker process: stdout and stderr into its log file, verl_lite's warnings and everybody's
    errors to the console (the original stderr). Returns the file, or None when not routing."""
    path = os.environ.get(WORKER_LOG_ENV)
    if not path:
        return None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    console = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)  # sys.stdout / sys.stderr keep their objects, which now write into the file
    os.dup2(fd, 2)
    os.close(fd)
    root = _reset_root(logging.INFO)
    to_file = logging.StreamHandler(sys.stderr)
    to_file.setFormatter(logging.Formatter(FILE_FORMAT))
    root.addHandler(to_file)
    root.addHandler(ConsoleHandler(console, own_level=logging.WARNING))
    return path


def tail(path: str | None, num_lines: int = 20) -> str:
    """The last lines of a log file ('' when there is none here, e.g. on another node)."""
    if not path or not os.path.exists(path):
        return ""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 64 * 1024))
        lines = f.read().decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-num_lines:])

"""verl's prime reward manager (`reward_manager.name=prime`, from PRIME-RL): every row scored in a
pool of processes, a row whose scorer fails or runs past the limit scored 0.

As verl 0.9's PrimeRewardManager: the reward function is called positionally,
`compute_score(data_source, solution_str, ground_truth, extra_info)`, each row in one of up to 64
forked processes (at most one per CPU here), with 300 s per row; a number (or a bool) is the score,
a tuple or list gives its first item; an exception or the time limit scores the row 0. The score sits
on the response's last valid token; no extra info is kept. What verl prints per failed row is one
warning per batch here, naming how many rows failed and the first failure, and the count is the
`reward_extra/prime_failed/mean` metric (the share of rows scored 0 that way), so no failure is
silent. A result of another kind (a dict) stops the run with one line (verl stops with a KeyError).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing
import os
import time

from verl_lite.reward.naive import NaiveRewardManager, RewardError, function_name
from verl_lite.utils.scores import short_repr

log = logging.getLogger("verl_lite")

ROW_TIMEOUT_S = 300.0  # verl's per-row limit
MAX_PROCESSES = 64  # verl's pool size


def _first(result):
    """verl's reading of a result: a number as it is, a sequence's first item; None otherwise."""
    if isinstance(result, (int, float, bool)):
        return float(result)
    if isinstance(result, (tuple, list)) and result and isinstance(result[0], (int, float, bool)):
        return float(result[0])
    return None


class PrimeRewardManager(NaiveRewardManager):
    positional_call = True  # compute_score(data_source, solution_str, ground_truth, extra_info)

    def _number(self, result, text: str, where: str) -> tuple[float, dict]:
        return result["score"], {"prime_failed": result["prime_failed"]}  # _call_all's rows

    def _call_all(self, data, rows: list[tuple[int, dict]], progress: dict) -> list:
        progress["row"] = None
        calls = [call for _, call in rows]
        workers = max(1, min(MAX_PROCESSES, os.cpu_count() or 1, len(calls)))
        failures: list[str] = []
        scores: list[float | None] = [None] * len(calls)
        # fork, as verl's pool does on Linux: the function need not be importable by name in a child
        pool = cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
        try:
            futures = {
                pool.submit(
                    self.compute_score,
                    c["data_source"],
                    c["solution_str"],
                    c["ground_truth"],
                    c["extra_info"],
                ): i
                for i, c in enumerate(calls)
            }
            done, late = cf.wait(futures, timeout=ROW_TIMEOUT_S)
            for future in late:
                failures.append(
                    f"{self._where(data, futures[future], calls[futures[future]]['data_source'])}: "
                    f"no result within {ROW_TIMEOUT_S:g} s"
                )
            for future in done:
                i = futures[future]
                try:
                    result = future.result()
                except Exception as e:  # the scorer raised (or its process died): 0, as in verl
                    failures.append(
                        f"{self._where(data, i, calls[i]['data_source'])}: {type(e).__name__}: {e}"
                    )
                    continue
                scores[i] = _first(result)
                if scores[i] is None:
                    raise RewardError(
                        f"reward function {function_name(self.compute_score)} returned {short_repr(result)} for "
                        f"{self._where(data, i, calls[i]['data_source'])}; reward_manager.name=prime takes a number "
                        "or a tuple whose first item is the score"
                    )
        finally:
            _end_pool(pool)
        if failures:
            log.warning(
                "reward_manager.name=prime: %d of %d rows scored 0 because their reward function %s failed "
                "or ran past %g s (verl's rule); the first: %s",
                len(failures),
                len(calls),
                function_name(self.compute_score),
                ROW_TIMEOUT_S,
                failures[0],
            )
        failed = {i for i, s in enumerate(scores) if s is None}
        return [
            {"score": 0.0 if i in failed else scores[i], "prime_failed": float(i in failed)}
            for i in range(len(calls))
        ]


def _end_pool(pool: cf.ProcessPoolExecutor) -> None:
    """Stop the pool without waiting for a scorer still running (verl terminates its processes)."""
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + 5
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()

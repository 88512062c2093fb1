"""The naive reward manager: decode each response, score it by rule, reward its last token.

verl's `naive` manager: the response is decoded up to its length (a multi-turn response with its
tool and user turns, as verl decodes it) and its score is placed on its last token the policy
sampled (the last valid token of a single-turn response) of a (batch, response_len) tensor, which
the advantage estimators sum. The scorer is called as verl calls it, by
keyword (`compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`, scorers.py), with
verl's extra_info: the row's, with the agent loop's num_turns, tool rewards and turn scores
(extra_info.py). An `async def` scorer is awaited, every row of the batch at once on one event loop
(verl's reward loop gathers a batch's rows too); a plain one runs row by row on the driver's main
thread, where the deadline below can interrupt it. A scorer that raises, calls sys.exit, returns
something that is not a finite number (or a number beyond float range), or runs past `timeout`
seconds for a batch
(reward_model.timeout) stops the run with a RewardError naming the function and its file, the
sample's parquet file and row (through `locate`, set from the dataset) and its data_source: a
silently wrong reward would poison training without a trace.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import numbers
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager

import torch

from verl_lite.algos.masked import last_policy_token, response_lengths
from verl_lite.errors import RunError
from verl_lite.protocol import DataProto
from verl_lite.reward.deadline import DeadlineExceeded, deadline
from verl_lite.reward.extra_info import build_extra_info
from verl_lite.reward.scorers import VERL_CALL
from verl_lite.utils.scores import as_float, short_repr
from verl_lite.utils.user_code import exits_as_errors

log = logging.getLogger(__name__)


class RewardError(RunError):
    """The reward function failed on a sample, returned a non-number, or ran past reward_model.timeout."""


def function_name(fn: Callable) -> str:
    """`name (file)` of a reward function, for messages."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", None) or repr(fn)
    return f"{name} ({code.co_filename})" if code is not None else name


class NaiveRewardManager:
    timeout: float | None = None  # seconds per batch (reward_model.timeout); None: no limit
    locate: Callable[[int], str] | None = None  # dataset index -> "file row N"
    experiment_name: str = ""  # trainer.experiment_name (the gdpo manager passes it on)
    plain_score_as_acc = False  # a scorer's plain number also as the extra info `acc` (verl's dapo, gdpo)
    call = VERL_CALL  # how the reward function is called (the batch manager: BATCH_CALL)
    positional_call = False  # by position, not keyword (the prime manager)

    def __init__(
        self, tokenizer, compute_score: Callable, reward_fn_key: str = "data_source", num_examine: int = 0
    ):
        self.tokenizer, self.compute_score = tokenizer, compute_score
        self.reward_fn_key, self.num_examine = reward_fn_key, num_examine
        self.is_async = inspect.iscoroutinefunction(inspect.unwrap(compute_score))  # verl's check

    def __call__(self, data: DataProto) -> tuple[torch.Tensor, dict[str, list]]:
        progress = {"row": None}
        stuck = (
            f"verl_lite: reward function {function_name(self.compute_score)} did not return within "
            f"reward_model.timeout={self.timeout} s and could not be interrupted (it holds the interpreter "
            "in C code, e.g. a regular expression), so the run was ended, and every process it started; "
            "the stacks of its threads are in the run's main_ppo.log"
        )
        try:
            with deadline(self.timeout, last_words=stuck):
                return self._score_batch(data, progress)
        except DeadlineExceeded:
            i = progress["row"]
            where = (
                self._where(data, i, data.non_tensor_batch["data_source"][i])
                if i is not None
                else f"the batch's {len(data)} rows at once"
            )
            raise RewardError(
                f"reward function {function_name(self.compute_score)} did not finish the batch within "
                f"reward_model.timeout={self.timeout} s (it was scoring {where}); make it faster or raise "
                "reward_model.timeout"
            ) from None

    def _score_batch(self, data: DataProto, progress: dict) -> tuple[torch.Tensor, dict[str, list]]:
        responses = data.batch["responses"]  # (bs, T)
        response_mask = data.batch["response_mask"]
        if "attention_mask" in data.batch:  # a multi-turn response: its inserted tokens are read too
            lengths = response_lengths(data.batch["attention_mask"], responses.shape[1]).long()
        else:
            lengths = response_mask.sum(-1).long()
        last = last_policy_token(response_mask)
        rows = []  # per row: its valid length and verl's keywords for the scorer
        for i in range(len(data)):
            n = int(lengths[i])
            text = self.tokenizer.decode(responses[i, :n].tolist(), skip_special_tokens=True)
            call = {
                # the data.reward_fn_key column, which the dataset hands on as data_source (rlhf_dataset)
                "data_source": data.non_tensor_batch["data_source"][i],
                "solution_str": text,
                "ground_truth": data.non_tensor_batch["reward_model"][i].get("ground_truth"),
                "extra_info": self.extra_info(data.non_tensor_batch, i),
            }
            rows.append((n, call))
        results = self._call_all(data, rows, progress)
        rewards = torch.zeros_like(responses, dtype=torch.float32)
        extra: dict[str, list] = defaultdict(list)
        shown: dict[str, int] = defaultdict(int)
        for i, ((n, call), result) in enumerate(zip(rows, results, strict=True)):
            source, text = call["data_source"], call["solution_str"]
            score, details = self._number(result, text, self._where(data, i, source))
            score = self.shape(score, n, details)
            for key, value in details.items():
                extra[key].append(value)
            if n > 0:
                rewards[i, last[i]] = score
            if shown[source] < self.num_examine:
                shown[source] += 1
                # examples for the run's log file (utils/logs.py); log_val_generations puts samples on the console
                log.debug(
                    "[%s] response=%r ground_truth=%r score=%s", source, text, call["ground_truth"], score
                )
        return rewards, dict(extra)

    def _call_all(self, data: DataProto, rows: list[tuple[int, dict]], progress: dict):
        """The scorer's result for each row: row by row as they are read (a plain scorer), or all
        at once (an async one)."""
        if self.is_async:
            return self._all_at_once(data, rows, progress)
        return self._row_by_row(data, rows, progress)

    def _row_by_row(self, data: DataProto, rows: list[tuple[int, dict]], progress: dict):
        for i, (_, call) in enumerate(rows):
            progress["row"] = i
            with self._guard(self._where(data, i, call["data_source"]), call):
                result = self.compute_score(**call)
            yield result

    def _all_at_once(self, data: DataProto, rows: list[tuple[int, dict]], progress: dict) -> list:
        """Every row's call as a task of one event loop; the first error (or the deadline) ends
        them all (asyncio.run cancels the rest)."""

        async def one(i: int, call: dict):
            with self._guard(self._where(data, i, call["data_source"]), call):
                return await self.compute_score(**call)

        async def every_row():
            return await asyncio.gather(*(one(i, call) for i, (_, call) in enumerate(rows)))

        progress["row"] = None
        return asyncio.run(every_row())

    def extra_info(self, non_tensor_batch: dict, i: int) -> dict:
        """Row i's extra_info for the scorer (reward/extra_info.py); subclasses add keys (gdpo)."""
        return build_extra_info(non_tensor_batch, i)

    def shape(self, score: float, length: int, details: dict) -> float:
        """The reward of a response from its score and valid length; subclasses add terms (dapo)."""
        return score

    def _where(self, data: DataProto, i: int, source) -> str:
        """Where a sample came from: its parquet file and row (or dataset index), batch row, data_source."""
        positions = data.non_tensor_batch.get("dataset_index")  # the dataset's (rlhf_dataset.DATASET_INDEX)
        index = positions[i] if positions is not None else None
        if index is None:
            return f"batch row {i} (data_source={source!r})"
        origin = self.locate(int(index)) if self.locate is not None else f"dataset index {index}"
        return f"{origin} (batch row {i}, data_source={source!r})"

    @contextmanager
    def _guard(self, where: str, call: dict | None = None):
        """The scorer's exception or exit, around one call, as a RewardError naming the sample (its
        response and ground truth: `call`) or the rows (the batch manager's one call)."""
        name = function_name(self.compute_score)
        response = f", response={call['solution_str'][:200]!r}" if call else ""
        truth = f", ground_truth={call['ground_truth']!r}" if call else ""
        with exits_as_errors(  # sys.exit() in a reward function would end the run with its status
            f"reward function {name}",
            after=f" on {where}{response}",
            fix="a reward function must return a score (raise an exception to stop the run)",
            error=RewardError,
        ):
            try:
                yield
            except Exception as e:
                raise RewardError(
                    f"reward function {name} raised {type(e).__name__}: {e} on {where}{response}{truth}"
                ) from e

    def _number(self, result, text: str, where: str) -> tuple[float, dict]:
        """The score and the extra details of a scorer's result; a RewardError if it is not a finite number."""
        name = function_name(self.compute_score)
        value = result.get("score") if isinstance(result, dict) else result
        number = as_float(value)
        if number is None or not math.isfinite(number):
            beyond = number is None and isinstance(value, numbers.Real)
            raise RewardError(
                f"reward function {name} returned {short_repr(result)} for {where}, response={text[:200]!r}; "
                + ("that is beyond the range of a float; " if beyond else "")
                + "it must return a finite number or a dict with a numeric 'score'"
            )
        # verl's managers keep every key of a dict result, "score" too; dapo's and gdpo's record a plain
        # number as acc, naive's records nothing
        if isinstance(result, dict):
            return number, dict(result)
        return number, ({"acc": number} if self.plain_score_as_acc else {})

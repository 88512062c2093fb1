"""The trainer's side of a checkpoint across its worker groups: TrainerCheckpoint, which the trainer
holds and hands the worker groups, the step and the driver's state (sampler, KL controller) to.

    contents             what a resume loads per role (each role's checkpoint.load_contents)
    find_resume_path     the checkpoint to resume from, vetted when the trainer is built (before workers):
                         complete, safe to load, saved from a model of this size and LoRA setup
    save                 every role writes into one temp folder, the driver adds its own state
                         (sampler, KL controller), then one atomic commit and rotation, in the background
    wait                 block until that commit is published (before the next save, at the end)
    load                 every role loads its part, the driver's state is restored

The folder layout, the atomic commit and rotation are in checkpoint.py; this file decides what
goes into a checkpoint and who writes it.

The commit hashes every file of the checkpoint for its manifest (utils/manifest.py): one read of
the whole checkpoint, tens of seconds for a large model. It runs on one background thread while
the next steps train; nothing touches the checkpoint folder meanwhile (the workers wrote it and
returned; the next save waits for this commit first). Until it is published, the previous
checkpoint and the tracker pointing at it stay as they were, so a crash meanwhile resumes from
the previous one, as a crash during a save always did.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor

from verl_lite.algos.kl_ctrl import KLController
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.data.rlhf_dataset import EpochSampler
from verl_lite.errors import RunError
from verl_lite.trainer import checkpoint as ckpt
from verl_lite.trainer.checkpoint_lora import lora_problems
from verl_lite.trainer.checkpoint_vet import model_size_problems, vet_checkpoint

log = logging.getLogger(__name__)


class TrainerCheckpoint:
    def __init__(self, config: PPOTrainerConfig, use_critic: bool, world_size: int):
        self.config, self.use_critic, self.world_size = config, use_critic, world_size
        self.committing: tuple[int, Future] | None = None  # the step being committed in the background
        self.committer: ThreadPoolExecutor | None = None
        self.failed_tmp: str | None = None  # a failed save's temp folder (discard_failed)
        self.saved: list[int] = []  # the steps this run committed: the only ones rotation removes
        # what a resume loads per role (each role's checkpoint.load_contents)
        self.contents = {"actor": config.actor_rollout_ref.actor.checkpoint.load_contents}
        if use_critic:
            self.contents["critic"] = config.critic.checkpoint.load_contents
        self.resume_path = self.find_resume_path()

    def find_resume_path(self) -> str | None:
        """The checkpoint to resume from, checked for completeness before any worker starts."""
        t = self.config.trainer
        path = ckpt.resolve_resume_path(t)
        if path is not None:
            key = (
                "trainer.resume_from_path"
                if t.resume_mode == "resume_path"
                else f"trainer.resume_mode=auto ({ckpt.TRACKER} in trainer.default_local_dir)"
            )
            weightless = ckpt.weightless_resume(path, self.contents, key)
            if weightless:
                raise ValueError(weightless)
            ckpt.check_complete(path, self.contents, self.world_size, key, t.resume_without_manifest)
            vet_checkpoint(path, self.contents, self.world_size, key)
            sizes = model_size_problems(path, self._resumed_models(), key)
            sizes = sizes or lora_problems(path, self._resumed_lora(), key)
            if sizes:
                raise ValueError(sizes[0])
        return path

    def _resumed_models(self) -> dict[str, tuple[str, str, dict]]:
        """role -> (model key, folder, override_config) of the roles whose weights a resume loads."""
        arr, critic = self.config.actor_rollout_ref.model, self.config.critic.model
        models = {"actor": ("actor_rollout_ref.model.path", arr.path, arr.override_config)}
        if self.use_critic:
            models["critic"] = ("critic.model.path", critic.path, critic.override_config)
        return {role: m for role, m in models.items() if "model" in self.contents.get(role, [])}

    def _resumed_lora(self) -> dict[str, tuple[object, str]]:
        """role -> (model config section, model kind) of the roles whose weights a resume loads."""
        models = {"actor": (self.config.actor_rollout_ref.model, "causal_lm")}
        if self.use_critic:
            models["critic"] = (self.config.critic.model, "value")
        return {role: m for role, m in models.items() if "model" in self.contents.get(role, [])}

    def save(
        self, step: int, groups: dict, sampler: EpochSampler, kl_ctrl: KLController | None, replay=None
    ) -> None:
        """Every role in `groups` writes into a temp folder, the driver adds its own state (with
        colocate_async, `replay`: its replay buffer), then one commit (hash, fsync, rename, tracker)
        and the rotation, in the background."""
        self.wait()
        t = self.config.trainer
        root = t.default_local_dir
        try:
            tmp = ckpt.begin(root, step)
        except OSError as e:
            raise RunError(f"cannot write the checkpoint of step {step} into {root}: {e}") from e
        try:
            for role, wg in groups.items():
                wg.save_checkpoint(os.path.join(tmp, role), step)
            driver = {"kl_coef": kl_ctrl.value} if kl_ctrl is not None else {}  # besides the sampler
            if replay is not None:
                driver["replay_buffer"] = replay.state_dict()
            try:
                ckpt.write_trainer_state(tmp, step, sampler.state_dict(), driver)
            except OSError as e:  # torch.save's own error names no file
                raise RunError(f"cannot write {os.path.join(tmp, ckpt.DATA_FILE)}: {e}") from e
        except BaseException:  # a full disk: the partial folder would stay behind, filling it
            ckpt.discard(tmp)
            # a rank that did not fail may still be writing into it (one rank died mid-save and the
            # call raised at once): removed again once the workers are stopped (discard_failed)
            self.failed_tmp = tmp
            raise
        keep = {role: getattr(t, f"max_{role}_ckpt_to_keep") for role in groups}
        if self.committer is None:
            self.committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verl_lite-commit")
        saved = [*self.saved, step]
        self.committing = (step, self.committer.submit(_commit, root, step, tmp, keep, saved))

    def discard_failed(self) -> None:
        """After the workers are stopped: the temp folder of a failed save, which a surviving rank
        may have written into after `save` removed it."""
        if self.failed_tmp:
            ckpt.discard(self.failed_tmp)
            self.failed_tmp = None

    def wait(self) -> None:
        """Block until the checkpoint being committed in the background is published; a failure
        there (a full disk) is raised here as one line naming the step and the folder."""
        if self.committing is None:
            return
        (step, future), self.committing = self.committing, None
        try:
            future.result()
            if step not in self.saved:
                self.saved.append(step)
        except OSError as e:
            raise RunError(
                f"the checkpoint of step {step} could not be committed in trainer.default_local_dir="
                f"{self.config.trainer.default_local_dir}: {e}"
            ) from e

    def finish(self, failing: bool = False) -> None:
        """At the end of fit: the last commit is published before fit returns. When the run is
        failing already, a commit failure is logged instead of hiding the run's own error."""
        try:
            self.wait()
        except RunError as e:
            if not failing:
                raise
            log.error("%s", e)
        finally:
            if self.committer is not None:
                self.committer.shutdown(wait=True)
                self.committer = None

    def load(self, groups: dict, sampler: EpochSampler, kl_ctrl: KLController | None, replay=None) -> int:
        """Every role in `groups` loads its part, the driver's state is restored; the step resumed
        at (0 without a checkpoint to resume from)."""
        if self.resume_path is None:
            return 0
        for role, wg in groups.items():
            wg.load_checkpoint(os.path.join(self.resume_path, role))
        state = ckpt.read_trainer_state(self.resume_path)
        step = int(state["global_step"])
        sampler.load_state_dict(state["sampler"])
        if kl_ctrl is not None and "kl_coef" in state.get("driver", {}):
            kl_ctrl.value = float(state["driver"]["kl_coef"])  # the adaptive controller's state
        saved = state.get("driver", {}).get("replay_buffer")
        if replay is not None and saved is not None:
            replay.load_state_dict(saved)  # the async mode's groups
        elif saved is not None:
            log.warning(
                "%s holds an async trainer mode's replay buffer (%d prompt groups in flight), which "
                "trainer.v1.trainer_mode=%s does not use: their prompts are not trained on; resume with the "
                "trainer.v1.trainer_mode it was saved with to keep them",
                self.resume_path,
                len(saved["buffer"]["groups"]),
                self.config.trainer.v1.trainer_mode,
            )
        log.info("resumed from %s at step %d", self.resume_path, step)
        # verl deletes after loading only the local copy of a checkpoint fetched from remote storage
        if self.config.trainer.del_local_ckpt_after_load:
            log.warning(
                "trainer.del_local_ckpt_after_load=True: kept %s; like verl, only the local copy of a "
                "checkpoint fetched from remote storage (HDFS) is deleted after loading, never a local checkpoint",
                self.resume_path,
            )
        return step


def _commit(root: str, step: int, tmp: str, keep: dict[str, int | None], saved: list[int]) -> str:
    """Commit, then rotate among `saved` (this run's steps, this one last): what runs in the
    background after a save (hashing every file for the manifest is most of it)."""
    start = time.perf_counter()
    try:
        final = ckpt.commit(root, step, tmp)
    except BaseException:  # not published: the partial temp folder goes (a full disk at the manifest)
        ckpt.discard(tmp)
        raise
    ckpt.rotate(root, keep, saved)
    log.info("saved checkpoint %s (committed in %.2fs)", final, time.perf_counter() - start)
    return final

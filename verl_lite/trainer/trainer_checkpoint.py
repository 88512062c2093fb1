"""The trainer's side of a checkpoint across its worker groups, as a mixin of RayPPOTrainer.

    checkpoint_contents  what a resume loads per role (each role's checkpoint.load_contents)
    find_resume_path     the checkpoint to resume from, vetted before any worker starts
    _save_checkpoint     every role writes into one temp folder, the driver adds its own state
                         (sampler, KL controller), then one atomic commit and rotation
    _load_checkpoint     every role loads its part, the driver restores its own state

The folder layout, the atomic commit and rotation are in checkpoint.py; this file decides what
goes into a checkpoint and who writes it.
"""

from __future__ import annotations

import logging
import os

from verl_lite.trainer import checkpoint as ckpt
from verl_lite.trainer.checkpoint_vet import vet_checkpoint

log = logging.getLogger(__name__)


class TrainerCheckpoint:
    def checkpoint_contents(self) -> dict[str, list[str]]:
        """What a resume loads per role (each role's checkpoint.load_contents)."""
        contents = {"actor": self.config.actor_rollout_ref.actor.checkpoint.load_contents}
        if self.use_critic:
            contents["critic"] = self.config.critic.checkpoint.load_contents
        return contents

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
            weightless = ckpt.weightless_resume(path, self.checkpoint_contents(), key)
            if weightless:
                raise ValueError(weightless)
            ckpt.check_complete(path, self.checkpoint_contents(), self.world_size, key)
            vet_checkpoint(path, self.checkpoint_contents(), self.world_size, key)
        return path

    def _save_checkpoint(self) -> None:
        """Every role writes into a temp folder, the driver adds its own state, then one commit."""
        t = self.config.trainer
        root, step = t.default_local_dir, self.global_steps
        tmp = ckpt.begin(root, step)
        for role, wg in self.checkpoint_wgs.items():
            wg.save_checkpoint(os.path.join(tmp, role), step)
        ckpt.write_trainer_state(tmp, step, self.sampler.state_dict(), self._driver_state())
        ckpt.commit(root, step, tmp)
        ckpt.rotate(root, {role: getattr(t, f"max_{role}_ckpt_to_keep") for role in self.checkpoint_wgs})
        log.info("saved checkpoint %s", ckpt.step_dir(root, step))

    def _driver_state(self) -> dict:
        """What the driver itself carries from step to step besides the sampler."""
        return {"kl_coef": self.kl_ctrl.value} if self.kl_ctrl is not None else {}

    def _load_checkpoint(self) -> None:
        if self.resume_path is None:
            return
        for role, wg in self.checkpoint_wgs.items():
            wg.load_checkpoint(os.path.join(self.resume_path, role))
        state = ckpt.read_trainer_state(self.resume_path)
        self.global_steps = int(state["global_step"])
        self.sampler.load_state_dict(state["sampler"])
        if self.kl_ctrl is not None and "kl_coef" in state.get("driver", {}):
            self.kl_ctrl.value = float(state["driver"]["kl_coef"])  # the adaptive controller's state
        log.info("resumed from %s at step %d", self.resume_path, self.global_steps)
        if self.config.trainer.del_local_ckpt_after_load:
            ckpt.delete_loaded(self.config.trainer.default_local_dir, self.resume_path)
            log.info("trainer.del_local_ckpt_after_load=True: deleted %s", self.resume_path)

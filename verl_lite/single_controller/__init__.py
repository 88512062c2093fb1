"""The single controller: one driver process drives groups of Ray worker actors.

Methods a worker marks with `@register(dispatch_mode)` become methods of its RayWorkerGroup on the
driver; calling one splits the arguments across workers, runs them in parallel and gathers results.
"""

from verl_lite.single_controller.decorator import Dispatch, register
from verl_lite.single_controller.ray_group import RayResourcePool, RayWorkerGroup, WorkerError
from verl_lite.single_controller.worker import Worker

__all__ = ["Dispatch", "register", "RayResourcePool", "RayWorkerGroup", "Worker", "WorkerError"]

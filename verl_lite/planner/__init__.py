"""The memory planner: device and host bytes of a run, phase by phase, and the offload it recommends.

request.py    what is asked: the run and its devices (`Request`), the actor's candidate (`Choice`)
engine_setup.py, engine_memory.py, activations.py, host.py
              one FSDP2 engine on one rank, from the model's shape (pure arithmetic, no torch)
role_engines.py  the engine each role builds, read from its config section
phases.py     every phase of a step on one device: the roles sharing it and the rollout, whose memory
              model its backend declares in the rollout registry (rollout/memory.py)
recommend.py  the cheapest offload mode, levers and micro-batch that fit
auto_offload.py  the same at start-up (trainer.auto_offload) and for the trainer's colocated roles
cli.py        `python -m verl_lite.planner`

Nothing is imported here: scripts/gpu_check.py reads engine_memory.py on machines without Hydra.
"""

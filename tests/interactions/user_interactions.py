"""Interaction classes a user might write, named by dotted path in the tests' YAMLs."""

from verl_lite.interactions.base import BaseInteraction


class CountingInteraction(BaseInteraction):
    """Answers "no" until the model has spoken `turns` times (config), then ends the episode."""

    def __init__(self, config):
        super().__init__(config)
        self.turns = int(config.get("turns", 2))
        self.seen: dict = {}
        self.finalized: list = []

    async def start_interaction(self, instance_id=None, **kwargs):
        instance_id = await super().start_interaction(instance_id)
        self.seen[instance_id] = 0
        return instance_id

    async def generate_response(self, instance_id, messages, **kwargs):
        self.seen[instance_id] += 1
        done = self.seen[instance_id] >= self.turns
        return done, "yes" if done else "no", float(done), {}

    async def finalize_interaction(self, instance_id, **kwargs):
        self.finalized.append(instance_id)


class NotAsync:
    def __init__(self, config):
        pass

    def start_interaction(self, instance_id=None, **kwargs):
        return instance_id


class MisbehavingInteraction(CountingInteraction):
    """generate_response misbehaves as config.how says: `hang` (awaits forever), `block` (sleeps in
    its thread), `exit` (sys.exit), `nan` (a NaN score)."""

    async def generate_response(self, instance_id, messages, **kwargs):
        import asyncio
        import sys
        import time

        how = self.config.get("how")
        if how == "hang":
            await asyncio.Event().wait()
        if how == "block":
            time.sleep(5)
        if how == "exit":
            sys.exit(3)
        return False, "no", float("nan") if how == "nan" else 0.0, {}


class RequestKeyedInteraction(BaseInteraction):
    """Written for verl's ToolAgentLoop, which called start_interaction(request_id, ...), ignored what
    it returned and kept using the request id; its first answer has no score (None: verl skips it)."""

    def __init__(self, config):
        super().__init__(config)
        self.state: dict = {}

    async def start_interaction(self, instance_id=None, **kwargs):
        if instance_id is None:
            raise ValueError("no request id to keep the state under")
        self.state[instance_id] = 0  # returns nothing, as verl never read it

    async def generate_response(self, instance_id, messages, **kwargs):
        self.state[instance_id] += 1
        done = self.state[instance_id] >= 2
        return done, "ok" if done else "again", 1.0 if done else None, {}

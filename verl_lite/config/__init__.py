"""Config: the typed schema (schema.py), its Hydra registration (compose.py), and start-up
normalisation and validation (validate.py).

This package imports nothing heavy, so the engine can use the schema on machines without Hydra.
"""

"""verl.tools: base_tool and schemas (verl's tool contract, tools/base.py and tools/schema.py)."""

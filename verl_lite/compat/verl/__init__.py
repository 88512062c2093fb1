"""verl's top-level package, as verl_lite answers it where verl is not installed (compat/__init__.py)."""

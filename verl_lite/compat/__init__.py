"""verl's module paths (verl/...), each re-exporting verl_lite's class or function of verl's name, so a
user's file written for verl runs here unchanged where verl is not installed. `import verl...` finds
this tree through the hook in utils/verl_paths.py, which steps aside when a real verl is installed."""

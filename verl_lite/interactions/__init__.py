"""Interactions: a simulated user that answers the model between turns (verl's `interaction:` YAML).

base.py      verl's interaction contract (async start / generate_response / calculate_score /
             finalize)
gsm8k.py     the GSM8K interaction: tells the model whether its answer is right, ends when it is
registry.py  an interaction config YAML -> interactions by name; verl's shipped classes mapped
"""

"""Notebook views: trajectories in HTML, the dumps viewer, the episode stepper, a warning tally."""

"""Notebook views: HTML renderings of trajectories, the dumps viewer and the episode stepper."""

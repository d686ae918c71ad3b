"""Environments, agents and rewards: what an episode is played against and how it is scored."""

"""Servers for remote rollouts: the rollout server and the collector that drives it over HTTP."""

"""Rollout: one episode, the collector that runs many, dumps, process and Ray collectors."""

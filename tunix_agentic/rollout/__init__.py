"""Rollout: one episode, the collector that runs many, dumps, and collectors over processes and Ray."""

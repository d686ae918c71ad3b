"""Records every layer passes on (steps, trajectories, tool calls), the name registry, run_sync."""

"""Records every layer passes on (steps, trajectories, tool calls, statuses) and the name registry."""

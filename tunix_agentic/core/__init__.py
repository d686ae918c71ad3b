"""Records every layer passes on (steps, trajectories, tool calls) and the name registry."""

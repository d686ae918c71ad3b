"""Records every layer passes on (steps, trajectories, tool calls), the name registry, run_sync,
require (a notebook's optional extra)."""

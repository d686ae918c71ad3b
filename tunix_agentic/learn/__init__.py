"""The learner: losses, sharding, the GRPO/SFT trainer and the online loop."""

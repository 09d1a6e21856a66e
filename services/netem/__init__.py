"""netem: per-destination bandwidth, delay, jitter and loss between a compose project's containers (tc)."""

"""Tools built on the core library: the CLI, the local launcher, `plan`, benches, the experiment runner."""

"""Errors every part raises for bad input: one line naming the key or file, exit 2 at the command line."""


class ConfigError(ValueError):
    """A configuration key is unknown, missing or has a bad value; the message names the key."""

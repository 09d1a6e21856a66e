"""Frames in: reading files, live sources (streams, devices) and synthetic clips."""

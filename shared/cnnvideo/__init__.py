"""cnn-video: run a CNN split across a chain of edge devices over frame differences."""
__version__ = "0.1.0"

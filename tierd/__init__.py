"""tierd: a checkpoint tiering daemon for ML training clusters."""

__version__ = "0.1.0"

__all__ = ["__version__"]

"""autotune: profiling-driven auto-tuning of GR00T N1.6 and N1.7 training and other PyTorch jobs."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``autotune.prepare`` (best.yaml in your own loop, :mod:`autotune.api`), imported on first use."""
    if name in ("prepare", "Prepared"):
        from autotune import api

        return getattr(api, name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")

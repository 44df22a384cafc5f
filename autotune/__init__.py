"""autotune: a profiling-driven auto-tuner for GR00T N1.6 training and other PyTorch jobs."""

__version__ = "0.1.0"

"""A Hugging Face transformers ViT on image files decoded with PIL: needs ``autotune[hf]``."""

from autotune.workloads.image_classifier.workload import ImageClassifier

__all__ = ["ImageClassifier"]

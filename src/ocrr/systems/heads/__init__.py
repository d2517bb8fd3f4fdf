"""Trained heads over frozen embeddings: linear, the continual-learning baselines, CMR refinement,
LoRA, and their training machinery."""

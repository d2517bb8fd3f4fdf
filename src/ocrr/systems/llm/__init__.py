"""llm_icl: an LLM choosing the label shown the nearest corrections, its backends, prompts and answer cache."""

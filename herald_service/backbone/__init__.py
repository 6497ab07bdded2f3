"""Backbones: a resident causal LM (or a weight-free fake) that turns prompts into last-token residual states."""

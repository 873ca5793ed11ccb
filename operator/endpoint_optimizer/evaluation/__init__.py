"""Eval datasets, scorers and refusal detection."""

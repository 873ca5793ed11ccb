"""Judges: latency, errors, acceptance rate and eval gates, each giving a verdict."""

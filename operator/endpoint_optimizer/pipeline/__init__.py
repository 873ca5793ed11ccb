"""The decision engine: pure functions from (spec, status, observations) to actions."""

"""Prometheus exporter and CloudWatch reader."""

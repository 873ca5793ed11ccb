"""The first-run demo: `endpoint-optimizer sandbox` (run.py), its live view (progress.py), and
the emulated Kubernetes it runs on, shared with the e2e tests (cluster.py)."""

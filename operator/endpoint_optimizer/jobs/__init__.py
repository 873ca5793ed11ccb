"""Entrypoints that run inside SageMaker jobs (llm-compressor quantization)."""

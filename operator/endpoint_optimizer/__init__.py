"""endpoint-optimizer: a kopf operator that makes SageMaker LLM endpoints faster."""

__version__ = "0.1.0"

GROUP = "optimizer.dev"
VERSION = "v1alpha1"
KIND = "OptimizedEndpoint"
PLURAL = "optimizedendpoints"

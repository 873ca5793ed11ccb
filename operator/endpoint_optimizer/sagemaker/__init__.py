"""Pure SageMaker knowledge: request builders, naming, instance facts, the techniques and
their matrix, images, the llm-compressor training job. Nothing here calls AWS."""

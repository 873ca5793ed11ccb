"""A tiny random Llama with a trained byte-level BPE tokenizer and a ChatML template.

Hidden and intermediate sizes are multiples of 128 because the W4A16/W8A16 presets
quantize in groups of 128 input columns and refuse layers that do not divide.
"""

from __future__ import annotations

import random
from pathlib import Path

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]


def _corpus(seed: int) -> list[str]:
    rng = random.Random(seed)
    subjects = ["the cat", "a model", "the server", "my team", "the GPU", "this endpoint"]
    verbs = ["reads", "serves", "quantizes", "measures", "writes", "rolls back"]
    objects = ["the weights", "a request", "the latency", "some tokens", "the baseline"]
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "so", "vi", "de", "pa", "zu", "qe"]
    lines = []
    for _ in range(800):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        word = "".join(rng.choice(syllables) for _ in range(rng.randint(2, 4)))
        lines.append(
            f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)}. "
            f"What is {a} plus {b}? It is {a + b}. {word}"
        )
    return lines


def build_tiny_llama(directory: Path, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus(seed), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    tokenizer.chat_template = CHATML

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory

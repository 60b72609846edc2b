"""What a plan starts from, read from what a person types: a model (a built-in name or a
transformers ``config.json``), a device memory ("80GB": 80 GiB, as GPUs are sold), a link ("100Gb") and the hardware's
sustained FLOP rate. Every bad value is a ``ValueError`` naming the field and what to give."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from lab_utils.memory import stepmem
from lab_utils.netmodel import LINKS, Link

__all__ = ["BUILTIN", "Hardware", "model_fields", "parse_bytes", "parse_memory", "parse_link", "DEFAULT_TFLOPS"]

# Shapes of public models (their published configs, rounded to what the calculator needs).
BUILTIN: dict[str, dict] = {
    "llama-125m": dict(
        arch="llama", layers=12, hidden=768, heads=12, kv_heads=4, ffn=2048, vocab=32000, positions=4096
    ),
    "llama-3.2-1b": dict(
        arch="llama", layers=16, hidden=2048, heads=32, kv_heads=8, ffn=8192, vocab=128256, positions=131072, tied=True
    ),
    "llama-2-7b": dict(
        arch="llama", layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000, positions=4096
    ),
    "llama-3-8b": dict(
        arch="llama", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256, positions=8192
    ),
    "gpt2": dict(arch="gpt2", layers=12, hidden=768, heads=12, vocab=50257, positions=1024, attention="sdpa"),
    "bert-large": dict(arch="bert", layers=24, hidden=1024, heads=16, vocab=30522, positions=512, ffn=4096),
}

# Sustained (not peak) dense FLOP/s per device assumed when --tflops is not given: about 40 % of
# an H100 SXM's dense peak, 989 TFLOP/s in bf16 and 67 in fp32 (torch's default
# float32_matmul_precision "highest" uses no TF32; with allow_tf32=True pass --tflops). torchtitan's
# published Llama 3.1 8B FSDP runs (H100 at 500 W) imply, at the planner's 60.2 GFLOP per token,
# 347 and 338 TFLOP/s eager (lab 8, Going further) and 401 and 392 with torch.compile (Tables 1
# and 3: 6,667 and 6,514 tokens/s). An assumption, stated beside every time the planner prints:
# measure yours and pass --tflops.
DEFAULT_TFLOPS = {"bf16": 400.0, "fp32": 27.0}


@dataclass(frozen=True)
class Hardware:
    """The devices a plan runs on: how many, memory each (bytes), the link between them, their
    sustained FLOP rate (TFLOP/s) and the host link offloaded activations cross (bytes/s)."""

    devices: int
    memory: int
    link: Link
    tflops: float
    host_Bps: float = 25e9  # PCIe 4 x16, about 25 GB/s each way
    memory_note: str = ""  # how the memory the person typed was read (inputs.parse_memory)

    def __post_init__(self) -> None:
        if not (isinstance(self.devices, int) and self.devices >= 1):
            raise ValueError(f"--devices {self.devices!r}: give a whole number of devices >= 1")
        if self.memory <= 0:
            raise ValueError(f"--memory {self.memory!r}: give the memory of one device, e.g. 80GB")
        if not self.tflops > 0:
            raise ValueError(f"--tflops {self.tflops!r}: give the sustained TFLOP/s of one device, e.g. 400")


_SI = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}
_BINARY = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
# A device's memory is sold in binary units written "GB": an "80GB" A100 or H100 holds 80 GiB
# (nvidia-smi: 81920 MiB on an A100 80GB, 81559 usable on an H100), a "24GB" card 24 GiB.
_VENDOR = {"kb": 2**10, "mb": 2**20, "gb": 2**30, "tb": 2**40}
_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgt]i?b?|b)?\s*", re.IGNORECASE)


def _size(text: str | int, field: str) -> tuple[float, str]:
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text), ""
    m = _SIZE.fullmatch(str(text))
    unit = (m.group(2) or "").lower() if m else None
    if unit and not unit.endswith("b"):
        unit += "b"  # '80G' reads as 80GB
    if not m or unit not in _SI | _BINARY:
        raise ValueError(f"{field} {text!r}: give a size such as 80GB, 80GiB, 16000MB or a number of bytes (80e9)")
    return float(m.group(1)), unit


def parse_bytes(text: str | int, field: str = "--size") -> int:
    """A size in bytes as the SI and IEC units write it: '80GB' -> 80e9, '80GiB' -> 80 * 2**30,
    '16 gb', '40000MB'; a number (or '80e9') is bytes. A device's memory: ``parse_memory``."""
    value, unit = _size(text, field)
    return int(value * (_SI | _BINARY)[unit])


def parse_memory(text: str | int, field: str = "--memory") -> tuple[int, str]:
    """One device's memory as a person types it, and what it was read as: 'GB' (and 'MB', 'TB')
    as GPU vendors mean them, binary: '80GB' -> 80 GiB, as an "80GB" GPU holds; '80GiB' the same;
    a number (or '80e9') is bytes, for a decimal size."""
    value, unit = _size(text, field)
    if unit in ("", "b") and value < 2**20:
        raise ValueError(f"{field} {text!r}: a number is bytes, and this is under 1 MiB; give e.g. {value:g}GB")
    if unit in _VENDOR:
        decimal = f"{value:g}e{round(math.log10(_SI[unit]))}"
        return int(value * _VENDOR[unit]), (
            f"{field} {str(text).strip()} read as {value:g} {unit[0].upper()}iB, as a GPU sold as {value:g} "
            f"{unit.upper()} holds (give {decimal} bytes for a decimal size)"
        )
    return int(value * (_SI | _BINARY)[unit]), ""


def parse_link(text: str | Link, latency_us: float = 10.0, field: str = "--link") -> Link:
    """'100Gb' / '100Gbit' / '100Gb/s' / '400Gbps' (bits per second), '25GB/s' (bytes), or a
    preset name from ``lab_utils.netmodel.LINKS`` ('InfiniBand', '10GbE', ...)."""
    if isinstance(text, Link):
        return text
    for name, link in LINKS.items():
        if str(text).lower() == name.lower():
            return link
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT])(bit/s|bit|bps|b/s|b|B/s|Bps|B)\s*", str(text))
    if not m:
        raise ValueError(
            f"{field} {text!r}: give a bandwidth such as 100Gb (bits/s), 25GB/s (bytes/s) or one of {list(LINKS)}"
        )
    scale = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2).lower()]
    bits = m.group(3).startswith("b")
    return Link(str(text).strip(), latency_us * 1e-6, float(m.group(1)) * scale / (8 if bits else 1))


def model_fields(config: str | dict) -> dict:
    """Shape fields (without batch and seq) from a built-in name, a path to a transformers
    ``config.json``, or that file's dict."""
    if isinstance(config, str) and config in BUILTIN:
        return {"attention": "sdpa"} | BUILTIN[config]
    if isinstance(config, str):
        path = Path(config)
        if not path.is_file():
            raise ValueError(f"--config {config!r}: not a built-in shape {sorted(BUILTIN)} and no such file")
        try:
            config = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"--config {path}: not JSON ({e}); give a transformers config.json") from None
    kind = config.get("model_type")
    if kind not in ("llama", "gpt2", "bert"):
        raise ValueError(
            f"--config: model_type {kind!r} is not modelled; the calculator knows 'llama', 'gpt2' and 'bert' "
            "(a Llama-style decoder: set model_type to 'llama')"
        )
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(kind, **{k: v for k, v in config.items() if k != "model_type"})
    shape = stepmem.from_hf_config(cfg, batch=1, seq=1)
    fields = {f: getattr(shape, f) for f in ("arch", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab")}
    return fields | dict(positions=shape.positions, tied=shape.tied, attention=shape.attention, dropout=shape.dropout)


# Which config.json keys set each field the planner reads, per model_type (for the "read:" line).
_KEYS = {
    "llama": dict(layers=["num_hidden_layers"], hidden=["hidden_size"], heads=["num_attention_heads"],
                  kv_heads=["num_key_value_heads"], ffn=["intermediate_size"], vocab=["vocab_size"],
                  positions=["max_position_embeddings"], tied=["tie_word_embeddings"],
                  dropout=["attention_dropout"]),
    "gpt2": dict(layers=["n_layer"], hidden=["n_embd"], heads=["n_head"], ffn=["n_inner"], vocab=["vocab_size"],
                 positions=["n_positions"], tied=["tie_word_embeddings"],
                 dropout=["attn_pdrop", "resid_pdrop", "embd_pdrop"]),
    "bert": dict(layers=["num_hidden_layers"], hidden=["hidden_size"], heads=["num_attention_heads"],
                 ffn=["intermediate_size"], vocab=["vocab_size"], positions=["max_position_embeddings"],
                 tied=["tie_word_embeddings"], dropout=["hidden_dropout_prob", "attention_probs_dropout_prob"]),
}  # fmt: skip


def read_line(config: str | dict, fields: dict) -> str:
    """What the planner read from ``config``, each field the file does not set marked * (a
    transformers default, or the planner's for attention)."""
    given = None
    if isinstance(config, str) and config not in BUILTIN:
        config = json.loads(Path(config).read_text())
    if isinstance(config, dict):
        keys = _KEYS[config["model_type"]]
        given = {f for f, ks in keys.items() if any(k in config for k in ks)}
        if {"_attn_implementation", "attn_implementation"} & set(config):
            given.add("attention")
    mark = (lambda f: "") if given is None else (lambda f: "" if f in given else "*")
    llama = fields["arch"] == "llama"  # GPT-2's head is always tied, BERT's classifier never: no "tied"
    kv = fields.get("kv_heads") or fields["heads"]
    ffn = fields.get("ffn") or 4 * fields["hidden"]
    parts = [
        f"{fields['layers']} layers{mark('layers')}", f"hidden {fields['hidden']}{mark('hidden')}",
        f"heads {fields['heads']}{mark('heads')}" + (f" / kv {kv}{mark('kv_heads')}" if llama else ""),
        f"ffn {ffn}{mark('ffn')}", f"vocab {fields['vocab']}{mark('vocab')}",
        f"positions {fields.get('positions')}{mark('positions')}",
        *([f"tied {fields.get('tied', False)}{mark('tied')}"] if llama else []),
        f"attention {fields['attention']}{mark('attention')}",
        f"dropout {fields.get('dropout', 0.0):g}{mark('dropout')}",
    ]  # fmt: skip
    note = "" if given is None else "  (* not in the file: a default)"
    return f"read: {fields['arch']}, " + ", ".join(parts) + note

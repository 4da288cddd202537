"""One prompt forwarded once through the trainer's model, its responses as batches on it.

The samples of a GRPO group share their prompt token for token; the trainer forwards it
once (with autograd, the top layers' part of it is trained too) and then the responses,
``max_rows`` at a time, on its key/value states, optionally recomputing the trained
layers' activations in the backward pass (:mod:`rollhub_torch.recompute`). Only the sampled
tokens' log-probabilities come out (:mod:`rollhub_torch.token_logprobs`), at the sampling
temperature. The prompts of a step's groups usually share their start too (a system prompt,
the tools' schema): the trainer forwards that once a step and each prompt's rest on it
(:meth:`PromptForward.extend`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rollhub_torch.sequences import PromptGroup

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

__all__ = ["PromptForward"]


class PromptForward:
    """A prompt forwarded once; its responses are forwarded as batches on its states."""

    def __init__(
        self, model: PreTrainedModel, out: Any, cache_kw: str, before: int = 0
    ) -> None:
        self.model, self.out, self.cache_kw = model, out, cache_kw
        self.states = getattr(out, cache_kw)
        # tokens in the states: those forwarded here after ``before`` already held
        self.length = before + int(out.last_hidden_state.shape[1])

    @classmethod
    def run(cls, model: PreTrainedModel, prompt_ids: tuple[int, ...], cache_kw: str) -> PromptForward:
        """Forward ``prompt_ids`` through ``model``'s decoder, keeping its states."""
        import torch

        prompt = torch.tensor([prompt_ids], dtype=torch.long)
        return cls(model, model.get_decoder()(input_ids=prompt, use_cache=True), cache_kw)

    def extend(self, suffix_ids: tuple[int, ...]) -> PromptForward:
        """This prompt followed by ``suffix_ids``, forwarded on its states (which stay as
        they are: other prompts may extend the same prefix)."""
        if not suffix_ids:
            return self
        import torch
        from transformers import DynamicCache

        states = DynamicCache(
            ddp_cache_data=[(layer.keys, layer.values) for layer in self.states.layers]
        )
        out = self.model.get_decoder()(
            input_ids=torch.tensor([suffix_ids], dtype=torch.long), use_cache=True,
            **{self.cache_kw: states},
        )
        return PromptForward(self.model, out, self.cache_kw, before=self.length)

    def token_logprobs(self, group: PromptGroup, ids: torch.Tensor, trained: torch.Tensor,
                       temperature: float, *, recompute: bool = False) -> torch.Tensor:
        """Log-probabilities (at ``temperature``) of the sampled tokens where ``trained``,
        the responses ``ids`` forwarded as a batch on the prompt's states (with ``recompute``,
        the trained layers' activations are recomputed in the backward pass, not kept)."""
        from contextlib import nullcontext

        import torch

        from rollhub_torch.recompute import ReplayableCache, recomputed  # imports torch
        from rollhub_torch.token_logprobs import sampled_logprobs

        n = len(group.responses)
        expanded = ReplayableCache([
            (layer.keys.expand(n, -1, -1, -1), layer.values.expand(n, -1, -1, -1))
            for layer in self.states.layers
        ])
        valid = (torch.arange(ids.shape[1]).unsqueeze(0)
                 < torch.tensor([len(r.token_ids) for r in group.responses]).unsqueeze(1))
        mask = torch.cat([torch.ones((n, self.length), dtype=torch.long), valid.long()], 1)
        decoder = self.model.get_decoder()
        with recomputed(decoder.layers) if recompute else nullcontext():
            hidden = decoder(
                input_ids=ids, attention_mask=mask, use_cache=True, **{self.cache_kw: expanded}
            ).last_hidden_state
        # position j of a response is predicted by the state before it: the prompt's last
        # for j = 0, the response's own j - 1 after that
        before = torch.cat(
            [self.out.last_hidden_state[:, -1:].expand(n, 1, -1), hidden[:, :-1]], dim=1
        )
        return sampled_logprobs(
            before[trained], self.model.get_output_embeddings(), ids[trained], temperature
        )

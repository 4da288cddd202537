"""One prompt forwarded once through the trainer's model, its responses as batches on it.

The samples of a GRPO group share their prompt token for token; the trainer forwards it
once (with autograd, the top layers' part of it is trained too) and then the responses,
``max_rows`` at a time, on its key/value states, optionally recomputing the trained
layers' activations in the backward pass (:mod:`rollhub_torch.recompute`). Only the sampled
tokens' log-probabilities come out (:mod:`rollhub_torch.token_logprobs`), at the sampling
temperature. The prompts of a step's groups usually share their start too (a system prompt,
the tools' schema): the trainer forwards that once a step and each prompt's rest on it
(:meth:`PromptForward.extend`).

Each part's backward pass would also run back through the prompt's graph, once per part.
:meth:`PromptForward.cut` gives the parts the prompt's states as leaves instead: their
gradients add up there, and :meth:`PromptForward.backward` sends the sum through the
prompt's graph once (on the main job, the shared start's backward ran ~28 times a step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rollhub_torch.sequences import PromptGroup

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

__all__ = ["PromptForward"]


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().requires_grad_(t.requires_grad)


class PromptForward:
    """A prompt forwarded once; its responses are forwarded as batches on its states."""

    def __init__(
        self, model: PreTrainedModel, states: list[tuple[torch.Tensor, torch.Tensor]],
        last_hidden: torch.Tensor, cache_kw: str, length: int,
    ) -> None:
        self.model, self.cache_kw = model, cache_kw
        self.states = states  # per layer: keys and values, [1, kv heads, length, head dim]
        self.last_hidden = last_hidden  # [1, hidden]: the state that predicts what follows
        self.length = length
        self._cut_from: PromptForward | None = None

    @classmethod
    def _from_output(
        cls, model: PreTrainedModel, out: Any, cache_kw: str, before: int
    ) -> PromptForward:
        hidden = out.last_hidden_state
        cache = getattr(out, cache_kw)
        states = [(layer.keys, layer.values) for layer in cache.layers]
        return cls(model, states, hidden[:, -1], cache_kw, before + int(hidden.shape[1]))

    @classmethod
    def run(cls, model: PreTrainedModel, prompt_ids: tuple[int, ...], cache_kw: str) -> PromptForward:
        """Forward ``prompt_ids`` through ``model``'s decoder, keeping its states."""
        import torch

        prompt = torch.tensor([prompt_ids], dtype=torch.long)
        out = model.get_decoder()(input_ids=prompt, use_cache=True)
        return cls._from_output(model, out, cache_kw, before=0)

    def extend(self, suffix_ids: tuple[int, ...]) -> PromptForward:
        """This prompt followed by ``suffix_ids``, forwarded on its states (which stay as
        they are: other prompts may extend the same prefix)."""
        if not suffix_ids:
            return self
        import torch
        from transformers import DynamicCache

        out = self.model.get_decoder()(
            input_ids=torch.tensor([suffix_ids], dtype=torch.long), use_cache=True,
            **{self.cache_kw: DynamicCache(ddp_cache_data=list(self.states))},
        )
        return PromptForward._from_output(self.model, out, self.cache_kw, before=self.length)

    def cut(self) -> PromptForward:
        """This prompt with its states as leaves of autograd: what is forwarded on the cut
        backpropagates into them only, until :meth:`backward`."""
        cut = PromptForward(
            self.model, [(_leaf(k), _leaf(v)) for k, v in self.states],
            _leaf(self.last_hidden), self.cache_kw, self.length,
        )
        cut._cut_from = self
        return cut

    def backward(self) -> None:
        """Send the gradients gathered on this cut's states through the graph it was cut
        from, once (into that prompt's own cut, when it was extended from one)."""
        import torch

        source = self._cut_from
        if source is None:
            raise ValueError("backward() is for a prompt made by cut()")
        pairs = [
            (src, leaf.grad)
            for (sk, sv), (lk, lv) in zip(source.states, self.states, strict=True)
            for src, leaf in ((sk, lk), (sv, lv))
            if leaf.grad is not None
        ]
        if self.last_hidden.grad is not None:
            pairs.append((source.last_hidden, self.last_hidden.grad))
        if pairs:
            torch.autograd.backward([p[0] for p in pairs], [p[1] for p in pairs])

    def token_logprobs(
        self, group: PromptGroup, ids: torch.Tensor, trained: torch.Tensor, temperature: float,
        *, recompute: bool = False, frozen: tuple[int, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Log-probabilities (at ``temperature``) of the sampled tokens where ``trained``,
        the responses ``ids`` forwarded as a batch on the prompt's states (with ``recompute``,
        the trained layers' activations are recomputed in the backward pass, not kept).

        :param frozen: ``(first, hidden)``: what the responses enter layer ``first`` with,
            forwarded ahead (:mod:`rollhub_torch.frozen_ahead`); only the layers from
            ``first`` on run here.
        """
        from contextlib import nullcontext

        import torch

        from rollhub_torch.recompute import ReplayableCache, recomputed  # imports torch
        from rollhub_torch.token_logprobs import sampled_logprobs

        n = len(group.responses)
        expanded = ReplayableCache([
            (keys.expand(n, -1, -1, -1), values.expand(n, -1, -1, -1))
            for keys, values in self.states
        ])
        valid = (torch.arange(ids.shape[1]).unsqueeze(0)
                 < torch.tensor([len(r.token_ids) for r in group.responses]).unsqueeze(1))
        mask = torch.cat([torch.ones((n, self.length), dtype=torch.long), valid.long()], 1)
        decoder = self.model.get_decoder()
        with recomputed(decoder.layers) if recompute else nullcontext():
            if frozen is None:
                hidden = decoder(
                    input_ids=ids, attention_mask=mask, use_cache=True,
                    **{self.cache_kw: expanded},
                ).last_hidden_state
            else:
                from rollhub_torch.decoder_slice import forward_layers

                first, entering = frozen
                hidden = decoder.norm(forward_layers(
                    decoder, entering, decoder.layers[first:], attention_mask=mask,
                    cache=expanded, cache_kw=self.cache_kw,
                ))  # fmt: skip
        # position j of a response is predicted by the state before it: the prompt's last
        # for j = 0, the response's own j - 1 after that
        before = torch.cat(
            [self.last_hidden[:, None].expand(n, 1, -1), hidden[:, :-1]], dim=1
        )
        return sampled_logprobs(
            before[trained], self.model.get_output_embeddings(), ids[trained], temperature
        )

"""The embedded ``torch`` trainer on the real SmolLM2 model and the real engine.

What a trainer must never get wrong: the learner sees exactly the sampled ids, computes the
same logprobs the sampler reported, trains only where the mask is 1, moves a positively
advantaged sequence up and a negative one down, and hands over exactly what it trained.
"""

from __future__ import annotations

import asyncio
import math

import pytest
import torch
from rollhub.episode import Episode, EpisodeGroup
from rollhub.errors import ConfigError
from rollhub.sampling import SamplingParams
from rollhub.trace import TraceRecord
from rollhub.training import TrainingBatch
from rollhub_gateway.engines.transformers_engine import TransformersBackend, TransformersOptions
from rollhub_torch import trainer as trainer_module
from rollhub_torch.sequences import prompt_groups
from rollhub_torch.trainer import TorchTrainer, TorchTrainerOptions

pytestmark = pytest.mark.slow

T = 0.7
TAIL = "<|im_end|>\n<|im_start|>tool\n9637<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def engine() -> TransformersBackend:
    backend = TransformersBackend(TransformersOptions(max_batch_size=8, threads=1))
    backend._load()
    yield backend
    assert backend.engine is not None
    backend.engine.stop()


@pytest.fixture(scope="module")
def episodes(engine: TransformersBackend) -> list[Episode]:
    """Six two-turn episodes of one prompt, sampled by the real engine; the tool result
    between the turns is environment text (mask 0)."""
    tok = engine.tokenizer
    prompt = tok.encode(
        "<|im_start|>system\nUse the calculator for arithmetic.<|im_end|>\n"
        "<|im_start|>user\nWhat is 23 * 419?<|im_end|>\n<|im_start|>assistant\n"
    )
    tail = tok.encode(TAIL)
    # Seeded per call: unseeded samples may repeat one another, and a repeated sequence
    # given both advantages cannot move up and down at once (an occasional false failure).
    def params(seed: int) -> SamplingParams:
        return SamplingParams(max_tokens=12, temperature=T, seed=seed)

    async def sample() -> list[Episode]:
        first = await asyncio.gather(*(engine.generate(prompt, params(i)) for i in range(6)))
        second = await asyncio.gather(
            *(engine.generate(prompt + g.token_ids + tail, params(100 + i))
              for i, g in enumerate(first))
        )
        out = []
        for i, (g, g2) in enumerate(zip(first, second, strict=True)):
            record = TraceRecord(
                session_id=f"s{i}", prompt_ids=prompt,
                response_ids=g.token_ids + tail + g2.token_ids,
                response_mask=[1] * len(g.token_ids) + [0] * len(tail) + [1] * len(g2.token_ids),
                response_logprobs=g.logprobs + [0.0] * len(tail) + g2.logprobs,
            )
            out.append(Episode(f"e{i}", "g", f"s{i}", i, "ok", traces=[record], reward=float(i % 2)))
        responses = {tuple(e.traces[0].response_ids) for e in out}
        assert len(responses) == len(out), "the seeded samples must differ from one another"
        return out

    return asyncio.run(sample())


def _trainer(**options) -> TorchTrainer:
    trainer = TorchTrainer(TorchTrainerOptions(temperature=T, threads=1, **options))
    asyncio.run(trainer.start())
    return trainer


def _sequence_logprob(trainer: TorchTrainer, record: TraceRecord) -> float:
    """Σ log p(sampled token) over the mask-1 tokens, from one whole forward pass."""
    full = torch.tensor([record.prompt_ids + record.response_ids])
    with torch.no_grad():
        logits = trainer.model(input_ids=full).logits[0].float() / T
    lps = torch.log_softmax(logits, -1)
    p = len(record.prompt_ids)
    return sum(
        float(lps[p + j - 1, t])
        for j, (t, m) in enumerate(zip(record.response_ids, record.response_mask, strict=True))
        if m
    )


def test_the_learner_recomputes_the_samplers_logprobs(episodes: list[Episode]) -> None:
    trainer = _trainer(learning_rate=0.0)
    groups, stats = prompt_groups([(e, 1.0) for e in episodes])
    assert len(groups) == 1 and len(groups[0].responses) == 6  # one prompt, forwarded once
    assert stats.trained_tokens == sum(sum(r.response_mask) for e in episodes for r in e.traces)
    assert stats.masked_tokens == 6 * len(trainer_tail_ids(episodes))
    metrics = trainer._train(groups, stats.trained_tokens)
    assert abs(metrics["sampler_learner_kl"]) < 1e-4
    assert math.isclose(metrics["loss"], -1.0, abs_tol=1e-3)  # ratio 1 on every token


def trainer_tail_ids(episodes: list[Episode]) -> list[int]:
    record = episodes[0].traces[0]
    return [t for t, m in zip(record.response_ids, record.response_mask, strict=True) if not m]


@pytest.mark.parametrize(("max_rows", "recompute"), [(16, True), (4, True), (1, True), (4, False)])
def test_grouped_forward_gives_the_gradient_of_whole_records(
    episodes: list[Episode], max_rows: int, recompute: bool
) -> None:
    # 16: the six responses in one batch; 4 and 1: in parts, on one forward of the prompt;
    # the trained layers' activations recomputed in the backward pass, or kept
    trainer = _trainer(learning_rate=0.0, grad_clip_norm=0.0, max_rows=max_rows,
                       recompute=recompute)  # clipping would rescale
    pairs = [(e, 1.0 if e.reward else -1.0) for e in episodes]
    groups, stats = prompt_groups(pairs)
    trainer._train(groups, stats.trained_tokens)
    grouped = {k: p.grad.clone() for k, p in trainer.trained.items()}
    trainer.optimizer.zero_grad(set_to_none=True)
    # the same loss, one record at a time over its whole sequence
    for episode, adv in pairs:
        record = episode.traces[0]
        full = torch.tensor([record.prompt_ids + record.response_ids])
        logits = trainer.model(input_ids=full).logits[0].float() / T
        lps = torch.log_softmax(logits, -1)
        p = len(record.prompt_ids)
        loss = torch.zeros(())
        for j, (t, m, old) in enumerate(zip(record.response_ids, record.response_mask,
                                            record.response_logprobs, strict=True)):
            if m:
                loss = loss - torch.exp(lps[p + j - 1, t] - old) * adv
        (loss / stats.trained_tokens).backward()
    for name, grad in grouped.items():
        ref = trainer.trained[name].grad
        assert torch.allclose(grad, ref, atol=1e-5, rtol=1e-3), name


def test_one_step_moves_good_samples_up_and_bad_ones_down(
    episodes: list[Episode], monkeypatch: pytest.MonkeyPatch
) -> None:
    released: list[int] = []  # the step's freed activations go back to the system
    monkeypatch.setattr(trainer_module, "release_free_memory", lambda: released.append(1) or True)
    trainer = _trainer(learning_rate=2e-4)
    advantages = {e.episode_id: (1.0 if e.reward else -1.0) for e in episodes}
    before = {e.episode_id: _sequence_logprob(trainer, e.traces[0]) for e in episodes}
    frozen = {k: p.detach().clone() for k, p in trainer.model.named_parameters()
              if k not in trainer.trained}
    batch = TrainingBatch(0, [EpisodeGroup("g", {}, episodes)], advantages, weight_version=0)
    result = asyncio.run(trainer.step(batch))
    assert result.weight_version == 1
    assert set(result.policy) == set(trainer.trained)  # exactly what was trained
    assert any("layers.29." in k for k in result.policy) and "model.norm.weight" in result.policy
    assert not any("layers.21." in k for k in result.policy)  # below the top 8: frozen
    for k, p in trainer.model.named_parameters():
        if k in frozen:
            assert torch.equal(p, frozen[k]), k
    after = {e.episode_id: _sequence_logprob(trainer, e.traces[0]) for e in episodes}
    up = [after[k] - before[k] for k, a in advantages.items() if a > 0]
    down = [after[k] - before[k] for k, a in advantages.items() if a < 0]
    assert sum(up) / len(up) > 0 > sum(down) / len(down)
    assert result.metrics["datums"] == 6 and result.metrics["masked_tokens"] > 0
    assert released == [1]
    # the gradients are not held until the next step (through its sampling)
    assert all(p.grad is None for p in trainer.trained.values())


def test_learning_rate_zero_changes_nothing_and_publishes_nothing(episodes: list[Episode]) -> None:
    trainer = _trainer(learning_rate=0.0)
    weights = {k: p.detach().clone() for k, p in trainer.trained.items()}
    advantages = {e.episode_id: (1.0 if e.reward else -1.0) for e in episodes}
    batch = TrainingBatch(0, [EpisodeGroup("g", {}, episodes)], advantages, weight_version=3)
    result = asyncio.run(trainer.step(batch))
    assert result.weight_version == 4 and result.policy is None
    for k, p in trainer.trained.items():
        assert torch.equal(p, weights[k]), k


def test_a_checkpoint_restores_weights_and_optimizer(tmp_path, episodes: list[Episode]) -> None:
    trainer = _trainer(learning_rate=1e-4)
    advantages = {e.episode_id: (1.0 if e.reward else -1.0) for e in episodes}
    asyncio.run(trainer.step(TrainingBatch(0, [EpisodeGroup("g", {}, episodes)], advantages, 0)))
    state = asyncio.run(trainer.save_state(tmp_path))
    assert (tmp_path / "policy.safetensors").exists() and state["steps_done"] == 1
    fresh = _trainer(learning_rate=1e-4)
    asyncio.run(fresh.load_state(tmp_path, state))
    assert fresh.steps_done == 1
    for k, p in trainer.trained.items():
        assert torch.equal(p, fresh.trained[k]), k
    assert asyncio.run(fresh.initial_policy()) is not None  # a resumed run republishes
    other = _trainer(learning_rate=1e-4, train_layers=4)
    with pytest.raises(ConfigError, match="train_layers"):
        asyncio.run(other.load_state(tmp_path, state))
    # a checkpoint of another model (same shapes) is not loaded over this one
    with pytest.raises(ConfigError, match="resume with the same model") as err:
        asyncio.run(fresh.load_state(tmp_path, {**state, "model": "/models/another"}))
    assert err.value.field == "trainer.model"


def test_the_engine_loads_a_checkpoint_policy(tmp_path, episodes: list[Episode]) -> None:
    trainer = _trainer(learning_rate=5e-4)
    advantages = {e.episode_id: (1.0 if e.reward else -1.0) for e in episodes}
    asyncio.run(trainer.step(TrainingBatch(0, [EpisodeGroup("g", {}, episodes)], advantages, 0)))
    asyncio.run(trainer.save_state(tmp_path))
    loaded = TransformersBackend(
        TransformersOptions(weights=str(tmp_path / "policy.safetensors"), threads=1)
    )
    loaded._load()
    try:
        params = dict(loaded.model.named_parameters())
        for k, p in trainer.trained.items():
            assert torch.equal(params[k], p.detach()), k
    finally:
        loaded.engine.stop()
    with pytest.raises(ConfigError, match="weights"):
        TransformersBackend(TransformersOptions(weights=str(tmp_path / "missing.safetensors")))._load()


def test_train_layers_beyond_the_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="train_layers=99"):
        _trainer(train_layers=99)


def _off_policy(episodes: list[Episode], shift: float) -> list[Episode]:
    """The episodes as if a stale sampler had found every other trained token ``shift``
    nats less likely than the learner does (ratio e^shift there)."""
    out = []
    for e in episodes:
        record = e.traces[0]
        logprobs = [
            lp - shift if m and j % 2 == 0 else lp
            for j, (lp, m) in enumerate(zip(record.response_logprobs, record.response_mask,
                                            strict=True))
        ]
        stale = record.model_copy(update={"response_logprobs": logprobs})
        out.append(Episode(e.episode_id, e.group_id, e.session_id, e.sample_index, "ok",
                           traces=[stale], reward=e.reward))
    return out


def _gradient(trainer: TorchTrainer, pairs: list[tuple[Episode, float]]) -> dict[str, torch.Tensor]:
    groups, stats = prompt_groups(pairs)
    trainer._train(groups, stats.trained_tokens)
    return {k: p.grad.clone() for k, p in trainer.trained.items()}


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo"])
def test_an_off_policy_ratio_is_truncated_or_clipped_never_unbounded(
    episodes: list[Episode], loss_fn: str
) -> None:
    """Tokens whose ratio is e^3 (a sampler 3 nats behind) weigh at most the cap (TIS) or
    drop out of the gradient (PPO's clip, dual-clipped for negative advantages); the
    unbounded ratio would weigh them e^3 ≈ 20."""
    stale = _off_policy(episodes, 3.0)
    pairs = [(e, 1.0 if e.reward else -1.0) for e in stale]
    trainer = _trainer(learning_rate=0.0, grad_clip_norm=0.0, loss_fn=loss_fn, tis_cap=2.0)
    groups, stats = prompt_groups(pairs)
    metrics = trainer._train(groups, stats.trained_tokens)
    got = {k: p.grad.clone() for k, p in trainer.trained.items()}
    assert metrics["clipped_fraction"] > 0.2  # the shifted tokens (about half of them)
    # the same gradient from the bounded weights, one record at a time
    trainer.optimizer.zero_grad(set_to_none=True)
    for episode, adv in pairs:
        record = episode.traces[0]
        full = torch.tensor([record.prompt_ids + record.response_ids])
        lps = torch.log_softmax(trainer.model(input_ids=full).logits[0].float() / T, -1)
        p = len(record.prompt_ids)
        loss = torch.zeros(())
        for j, (t, m, old) in enumerate(zip(record.response_ids, record.response_mask,
                                            record.response_logprobs, strict=True)):
            if not m:
                continue
            ratio = torch.exp(lps[p + j - 1, t] - old)
            if loss_fn == "ppo":
                surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 0.8, 1.2) * adv)
                if adv < 0:
                    surrogate = torch.maximum(surrogate, torch.tensor(3.0 * adv))
            else:
                surrogate = ratio * (torch.clamp(ratio.detach(), max=2.0) / ratio.detach()) * adv
            loss = loss - surrogate
        (loss / stats.trained_tokens).backward()
    for name, grad in got.items():
        assert torch.allclose(grad, trainer.trained[name].grad, atol=1e-5, rtol=1e-3), name
    # and it is not the unbounded importance-sampling gradient
    unbounded = _trainer(learning_rate=0.0, grad_clip_norm=0.0, tis_cap=1e9)
    raw = _gradient(unbounded, pairs)
    name = next(iter(got))
    assert not torch.allclose(got[name], raw[name], rtol=0.05)


def test_a_kl_penalty_pulls_towards_the_starting_weights(episodes: list[Episode]) -> None:
    pairs = [(e, 1.0 if e.reward else -1.0) for e in episodes]
    trainer = _trainer(learning_rate=1e-3, kl_coef=0.5)
    groups, stats = prompt_groups(pairs)
    first = trainer._train(groups, stats.trained_tokens)
    assert first["reference_kl"] < 1e-7  # the weights are the reference still
    second = trainer._train(groups, stats.trained_tokens)
    assert second["reference_kl"] > 1e-5  # one step of lr 1e-3 moved them
    # the frozen lower layers are shared with the reference, the trained ones are not
    ours = dict(trainer.model.named_parameters())
    ref = dict(trainer.reference.named_parameters())
    assert ref["model.layers.0.mlp.up_proj.weight"].data_ptr() == ours[
        "model.layers.0.mlp.up_proj.weight"].data_ptr()
    assert not torch.equal(ref["model.norm.weight"], ours["model.norm.weight"])
    # the penalty's gradient points back: with no advantage, a small step along it
    # lowers the KL
    still = [(e, 0.0) for e in episodes]
    groups, stats = prompt_groups(still, skip_zero_advantage=False)
    for g in trainer.optimizer.param_groups:
        g["lr"] = 0.0  # the measurements themselves move nothing
    before = trainer._train(groups, stats.trained_tokens)["reference_kl"]
    with torch.no_grad():
        for p in trainer.trained.values():
            p -= 1e-2 * p.grad / (p.grad.norm() + 1e-12)
    trainer.optimizer.zero_grad(set_to_none=True)
    after = trainer._train(groups, stats.trained_tokens)["reference_kl"]
    assert after < before


def test_the_engine_samples_from_a_copy_sharing_the_frozen_layers(
    engine: TransformersBackend, episodes: list[Episode]
) -> None:
    """On the in-process transformers engine, the first policy is the trainer's model with
    only the trained parameters copied: the frozen ones exist once; a step's trained
    parameters reach the engine's copies and never the other way round."""
    import tomllib

    from rollhub.config import parse_config
    from rollhub.registry import ComponentContext

    config = parse_config(tomllib.loads(
        '[token_source]\nname = "gateway"\nengine = { name = "transformers" }\n'
        '[trainer]\nname = "torch"\n'
    ), env={})
    trainer = TorchTrainer(TorchTrainerOptions(temperature=T, threads=1, learning_rate=1e-3),
                           context=ComponentContext(config=config))
    asyncio.run(trainer.start())
    policy = asyncio.run(trainer.initial_policy())
    ours = dict(trainer.model.named_parameters())
    theirs = dict(policy.named_parameters())
    assert set(ours) == set(theirs)
    for name, param in theirs.items():
        if name in trainer.trained:  # the engine's own copy, equal at the start
            assert param is not ours[name] and torch.equal(param, ours[name]), name
        else:  # the very same tensor: no second copy of the frozen model
            assert param is ours[name], name
    copied = sum(p.numel() for p in trainer.trained.values())
    assert copied < 0.25 * sum(p.numel() for p in trainer.model.parameters())
    prompt = episodes[0].traces[0].prompt_ids
    greedy = SamplingParams(max_tokens=8, temperature=0.0, extra={"ignore_eos": True})
    own = engine.model
    before = asyncio.run(engine.generate(prompt, greedy))
    try:
        engine.update_policy(policy, 0)
        assert asyncio.run(engine.generate(prompt, greedy)).token_ids == before.token_ids
        advantages = {e.episode_id: (1.0 if e.reward else -1.0) for e in episodes}
        batch = TrainingBatch(0, [EpisodeGroup("g", {}, episodes)], advantages, weight_version=0)
        result = asyncio.run(trainer.step(batch))
        name = next(iter(trainer.trained))
        assert not torch.equal(theirs[name], ours[name])  # training did not reach the engine
        engine.update_policy(result.policy, 1)
        after = asyncio.run(engine.generate(prompt, greedy))
        assert after.weight_version == 1
        for k, p in trainer.trained.items():
            assert torch.equal(theirs[k], p.detach()), k  # the published step did
    finally:
        engine.update_policy(own, 0)
        asyncio.run(engine.generate(prompt, SamplingParams(max_tokens=1, temperature=0.0)))


@pytest.mark.parametrize(
    ("token_source", "model", "shares"),
    [
        ('name = "gateway"\nengine = { name = "transformers", options = { model = "M" } }',
         "M", True),
        ('name = "gateway"\nengine = { name = "transformers", options = { model = "M", '
         'dtype = "bfloat16" } }', "M", False),
        ('name = "gateway"\nurl = "http://127.0.0.1:9"\n'
         'engine = { name = "transformers", options = { model = "M" } }', "M", False),
        ('name = "gateway"\nengine = { name = "scripted" }', "smollm2-135m-instruct", False),
        ('name = "none"', "smollm2-135m-instruct", False),
    ],
)
def test_the_trained_model_and_temperature_are_read_from_the_run_config(
    token_source: str, model: str, shares: bool
) -> None:
    """The model trained is the one the gateway's transformers engine samples; its frozen
    layers are shared only with an in-process engine sampling in float32."""
    import tomllib

    from rollhub.config import parse_config
    from rollhub.registry import ComponentContext
    from rollhub_torch.trainer import _engine_shares

    config = parse_config(tomllib.loads(
        f'[experiment]\nsampling = {{ temperature = 0.6 }}\n[token_source]\n{token_source}\n'
    ), env={})
    trainer = TorchTrainer(TorchTrainerOptions(), context=ComponentContext(config=config))
    assert (trainer.model_name, trainer.temperature) == (model, 0.6)
    assert _engine_shares(config, model) is shares
    assert not _engine_shares(config, "another")
    bare = TorchTrainer(TorchTrainerOptions())
    assert (bare.model_name, bare.temperature) == ("smollm2-135m-instruct", 1.0)

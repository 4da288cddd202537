"""Sampling backends of the gateway: token ids in, sampled ids and logprobs out."""

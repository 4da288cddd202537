"""Rewards: the reward hooks' components merged per episode, the failure policy, and
rewards that score a group's episodes together."""

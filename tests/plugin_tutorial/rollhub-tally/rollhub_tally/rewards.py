"""A reward hook: one point when the agent's answer equals the prompt's expected answer."""

from rollhub import hookimpl


@hookimpl
def rollhub_collect_rewards(episode):
    expected = episode.payload.get("expected")
    if expected is None:
        return None  # nothing to compare with: add no reward component
    answer = (episode.result or {}).get("answer")
    return {"exact": 1.0 if answer == expected else 0.0}
